"""Run a callback right after a given module has been imported (or at once, if it already has been).

Standard library only and free of relative imports: the `.pth` fallback (see _autopatch.py) loads this file
by path at interpreter start-up, before anything else, so it must cost next to nothing and never raise.

One finder serves every caller: it is found again on sys.meta_path by its marker attribute, so the copy
loaded by path and the copy imported as symmem.integrations._imphook share their callbacks.
"""
import importlib.abc
import logging
import sys

_MARK = "_symmem_post_import_finder"
_log = logging.getLogger("symmem.integrations")


class _Loader(importlib.abc.Loader):
    """Wraps the real loader: runs the module as it would, then the callbacks waiting for it."""

    def __init__(self, loader, finder):
        self._loader = loader
        self._finder = finder

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        self._finder.fire(module.__name__, module)

    def __getattr__(self, name):  # get_source, is_package, get_resource_reader, ...: the real loader's
        return getattr(self._loader, name)


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self):
        self.callbacks = {}  # module name -> [callable(module)]
        self._resolving = set()
        setattr(self, _MARK, True)

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in self.callbacks or fullname in self._resolving:
            return None
        # Ask the other finders (not this one: that would recurse) for the real spec, then wrap its loader.
        self._resolving.add(fullname)
        try:
            spec = None
            for finder in list(sys.meta_path):
                if finder is self or getattr(finder, _MARK, False):
                    continue
                find = getattr(finder, "find_spec", None)
                if find is None:
                    continue
                spec = find(fullname, path, target)
                if spec is not None:
                    break
        finally:
            self._resolving.discard(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _Loader(spec.loader, self)
        return spec

    def fire(self, name, module):
        for callback in self.callbacks.pop(name, []):
            try:
                callback(module)
            except Exception:  # noqa: BLE001 - a failing patch must never break the user's import
                _log.warning("symmem: post-import hook for %s failed", name, exc_info=True)


def _finder():
    for f in sys.meta_path:
        if getattr(f, _MARK, False):
            return f
    f = _Finder()
    sys.meta_path.insert(0, f)
    return f


def when_imported(name, callback):
    """Call callback(module) once `name` is imported: now if it is in sys.modules, else right after its
    code has run (before the importer sees it, so `from name import X` gets what the callback set)."""
    module = sys.modules.get(name)
    if module is not None:
        try:
            callback(module)
        except Exception:  # noqa: BLE001
            _log.warning("symmem: post-import hook for %s failed", name, exc_info=True)
        return
    _finder().callbacks.setdefault(name, []).append(callback)


def pending(name):
    """True while a callback waits for `name` (for tests and for idempotent registration)."""
    for f in sys.meta_path:
        if getattr(f, _MARK, False):
            return bool(f.callbacks.get(name))
    return False
