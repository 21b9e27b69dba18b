"""What the SGLang and vLLM drop-ins share: the decision, made together by every rank of a group, whether
symmem serves that group's all-reduces and up to what size.

The frameworks build their communicator inside their own init with no try/except around it, and every
rank then dispatches on `disabled` and the size predicate alone. So construction must never raise, and all
ranks must reach the same answer: a rank that takes symmem while another takes NCCL hangs both. The
decision is therefore made in this order, over the group's CPU (gloo) process group:

 1. reasons every rank sees alike, without talking (mode off, world size 1, group not selected, a
    framework veto such as batch invariance): stay off, no collective at all;
 2. one all_gather_object of each rank's facts (host identity, CUDA device, whether the symmem layer
    imports, whether the framework's own torch class would work there): a group spanning hosts, or any rank
    unable to take part, turns every rank off before any rendezvous, so nobody waits for a timeout;
 3. in `fallback` mode, where every rank says torch's own class would work, that class is built and a
    second gather confirms it came up everywhere; otherwise
 4. symmem's communicator is built (its own rendezvous), each rank proposes a size cap, and a final gather
    takes the minimum: 0 anywhere means off everywhere.

Memory: each group that gets a communicator holds SYMMEM_WORKSPACE_BYTES (default 64 MiB) of device memory
per rank for the collectives' workspace, plus a small signal area; the log line reports what init took on
the GPU. Only the groups selected (by default tensor parallelism only) pay it.
"""
import logging
import os
import socket
from dataclasses import dataclass, field
from typing import Callable, Optional

MODES = ("fallback", "replace", "off")
KIB, MIB = 1 << 10, 1 << 20


def link_name(link):
    """The library's name of a symmem_link_t ("nvlink", "pcie", "host"); "unknown" for None."""
    if link is None:
        return "unknown"
    from symmem import _lib

    return _lib.LINK_NAMES.get(link, f"link {link}")


def _table(name):
    """symmem._settings when `name` is one of the table's variables (base/param.h), else None."""
    from symmem import _settings

    return _settings if _settings.known(name) else None


def env_mode(name, default="fallback"):
    """One of MODES from the environment. The table's variables (SYMMEM_SGLANG_MODE, SYMMEM_VLLM_MODE) follow
    its rule: empty is the default; another value warns, naming the valid values, and gives the default."""
    table = _table(name)
    if table is not None:
        return table.value(name, logging.getLogger("symmem.integrations")).lower()
    value = os.environ.get(name, "").strip().lower()
    if not value:
        return default
    if value in MODES:
        return value
    logging.getLogger("symmem.integrations").warning("%s=%s is not one of %s; using the default %s", name, value,
                                                      ", ".join(MODES), default)
    return default


def env_flag(name, what):
    """A 0/1 switch from the environment (default off); a value that is neither warns and stays off."""
    table = _table(name)
    if table is not None:
        return table.flag(name, logging.getLogger("symmem.integrations"))
    value = os.environ.get(name, "").strip().lower()
    if value in ("", "0", "false", "no", "off"):
        return False
    if value not in ("1", "true", "yes", "on"):
        logging.getLogger("symmem.integrations").warning("%s=%s is not 0 or 1; %s stays off", name, value, what)
        return False
    return True


WIRES = ("none", "int8")


def env_wire(name, log):
    """The all-reduce's wire format from the environment: "none" (exact, the default) or "int8" (the compressed
    wire: lossy, docs/collectives.md "Compressed wire"); anything else warns and stays exact."""
    table = _table(name)
    if table is not None:  # the table's rule: empty is the default, another value warns naming the valid ones
        return table.value(name, log).lower()
    value = os.environ.get(name, "").strip().lower()
    if value in ("", "0", "off"):
        return "none"
    if value not in WIRES:
        log.warning("%s=%r is not one of %s; all-reduces stay exact", name, value, "|".join(WIRES))
        return "none"
    return value


def wire_kwargs(name, log):
    """The inner communicator's keyword for env_wire's answer: {} while exact (stand-ins need not know it)."""
    wire = env_wire(name, log)
    return {} if wire == "none" else {"wire": wire}


def parse_bytes(text):
    """'512K', '4M', '1G', '65536' -> bytes; ValueError otherwise."""
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    scale = {"K": KIB, "M": MIB, "G": 1 << 30}.get(t[-1:], 1)
    if scale != 1:
        t = t[:-1]
    n = int(t, 0)
    if n < 0:
        raise ValueError("negative size")
    return n * scale


def env_bytes(name, log):
    """A size from the environment, None when unset or empty (the caller's default)."""
    table = _table(name)
    if table is not None:
        value = table.value(name, log)
        return parse_bytes(value) if value else None
    value = os.environ.get(name, "").strip()
    if not value:
        return None
    try:
        return parse_bytes(value)
    except ValueError:
        log.warning("%s=%s is not a size (like 512K, 4M or 65536); using the default (by link)", name, value)
        return None


def human(nbytes):
    if nbytes is None:
        return "?"
    for unit, size in (("GiB", 1 << 30), ("MiB", MIB), ("KiB", KIB)):
        if nbytes >= size and nbytes % size == 0:
            return f"{nbytes // size} {unit}"
    if nbytes >= MIB:
        return f"{nbytes / MIB:.1f} MiB"
    return f"{nbytes} B"


def host_key():
    """What two processes must share to reach each other through symmem's bootstrap: the same kernel (its
    boot id) and the same network namespace (the Unix sockets live in its abstract namespace). Containers
    of one host with their own network namespace differ here, as they should."""
    parts = []
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            parts.append(f.read().strip())
    except OSError:
        parts.append(socket.gethostname())
    try:
        parts.append(os.readlink("/proc/self/ns/net"))
    except OSError:
        pass
    return "|".join(parts)


def safe_world_size(group):
    try:
        import torch.distributed as dist

        return dist.get_world_size(group)
    except Exception:  # noqa: BLE001
        return 1


def as_device(device):
    """torch.device from what the frameworks pass: an index, 'cuda:1' or a torch.device."""
    import torch

    if isinstance(device, torch.device):
        return device
    if isinstance(device, int):
        return torch.device("cuda", device)
    return torch.device(device)


def group_label(group):
    """The framework's name of a torch ProcessGroup: SGLang and vLLM create it with group_desc
    '<name>:cpu' ('tp:cpu'); '' when it has none."""
    desc = getattr(group, "group_desc", "") or ""
    if desc in ("undefined", "default_pg"):
        return ""
    return desc.rsplit(":", 1)[0] if ":" in desc else desc


def load_inner_class():
    """symmem's PyTorch communicator (the interface this package builds on, by composition)."""
    try:
        from symmem.torch_comm import SymmemCommunicator
    except ImportError:
        from symmem.torch import SymmemCommunicator
    return SymmemCommunicator


class _Capture(logging.Filter):
    """Keeps (and silences) the warnings the inner communicator logs while it is built, so the one reason
    this module logs can carry them."""

    def __init__(self):
        super().__init__()
        self.messages = []

    def filter(self, record):
        if record.levelno >= logging.WARNING:
            self.messages.append(record.getMessage())
            return False
        return True


@dataclass
class Plan:
    """What a framework's communicator asks of the negotiation."""
    framework: str                      # "SGLang" / "vLLM", for messages
    env_prefix: str                     # "SYMMEM_SGLANG": its _MODE and _MAX_BYTES variables
    log: logging.Logger
    mode: str                           # one of MODES
    veto: Optional[str] = None          # a reason every rank shares to stay off (step 1)
    max_bytes: Optional[int] = None     # explicit cap (environment or framework override)
    stock_probe: Optional[Callable] = None    # (device, world_size) -> None if torch's class would work
    stock_build: Optional[Callable] = None    # () -> an instance of torch's class
    inner_kwargs: dict = field(default_factory=dict)


@dataclass
class Outcome:
    backend: str = "off"                # "symmem", "torch" (the framework's own class) or "off"
    inner: object = None
    stock: object = None
    max_size: int = 0
    world_size: int = 1
    rank: int = 0
    reason: str = ""
    link: Optional[int] = None
    cap_source: str = ""
    mem_bytes: Optional[int] = None


class DropIn:
    """What both drop-in communicators share once `negotiate` has decided: adopting the outcome (the
    framework's own class, its state exposed and its methods called directly; or symmem's communicator, its
    methods served directly where it can), the fused all-reduce + add + RMSNorm, close, and the fallback to
    the stock instance for attributes this class lacks. A subclass names the stock attributes it mirrors
    (STOCK_ATTRS), the methods the framework dispatches on (STOCK_METHODS) and its eligibility predicate
    (SHOULD: the framework's name, which symmem's SymmemCommunicator also answers to)."""

    STOCK_ATTRS = ("dtype", "max_size", "world_size", "device", "group")
    STOCK_METHODS = ("all_reduce",)
    SHOULD = "should_torch_symm_mem_allreduce"
    _capped = False  # the inner communicator enforces the agreed cap (_serve_directly)

    def _init_fields(self, group):
        """Every attribute the frameworks' core and model code read, before anything can fail."""
        import torch

        self.disabled = True
        self.backend = "off"
        self.group = group
        self.dtype = torch.bfloat16   # as the frameworks' classes: model code compares activations against it
        self.max_size = 0
        self.world_size = safe_world_size(group)
        self.rank = 0
        self.device = None
        self._inner = None
        self._stock = None

    def _adopt(self, outcome):
        self.world_size, self.rank = outcome.world_size, outcome.rank
        self._disabled_reason = outcome.reason
        if outcome.backend == "torch":
            self._adopt_stock(outcome.stock)
        elif outcome.backend == "symmem":
            self._inner = outcome.inner
            self._inner_should = getattr(outcome.inner, self.SHOULD)
            self._inner_all_reduce = outcome.inner.all_reduce
            self.max_size = outcome.max_size
            self.backend = "symmem"
            self.disabled = False
            names = (self.SHOULD, "all_reduce", "should_all_reduce_add_rmsnorm", "all_reduce_add_rmsnorm")
            self._capped = self._serve_directly({n: n for n in names}, bind=self._bind_directly())
            self._serving()

    def _bind_directly(self):
        """Whether the framework's per-call methods may be the inner's own (no per-call condition here)."""
        return True

    def _serving(self):
        """Called once symmem serves the group."""

    def _declines(self):
        """A per-call reason of the framework's to send this call elsewhere (vLLM's micro-batch threads)."""
        return False

    def should_all_reduce_add_rmsnorm(self, inp):
        """Whether all_reduce_add_rmsnorm takes `inp`: symmem serves the group, the all-reduce's agreed size
        cap, the row within symmem.RMSNORM_MAX_HIDDEN: the same answer on every rank for the same shape."""
        if self.disabled or self.backend != "symmem" or self._declines() or inp.device != self.device:
            return False
        return inp.numel() * inp.element_size() <= self.max_size and self._inner.should_all_reduce_add_rmsnorm(inp)

    @property
    def disabled_reason(self):
        """Why this communicator serves no all-reduce (the reason negotiate logged), None while it serves."""
        if not self.disabled:
            return None
        return self.__dict__.get("_disabled_reason") or "not initialised"

    def _adopt_stock(self, stock):
        self._stock = stock
        self.disabled = bool(getattr(stock, "disabled", True))
        self.backend = "off" if self.disabled else "torch"
        if self.disabled:
            self._disabled_reason = f"the framework's own {type(stock).__name__} disabled itself"
        for attr in self.STOCK_ATTRS:
            if hasattr(stock, attr):
                setattr(self, attr, getattr(stock, attr))
        for method in self.STOCK_METHODS:
            setattr(self, method, getattr(stock, method))

    def __getattr__(self, name):
        # Only reached for attributes this class lacks: the framework's class may carry more.
        stock = self.__dict__.get("_stock")
        if stock is not None:
            return getattr(stock, name)
        raise AttributeError(name)

    def all_reduce_add_rmsnorm(self, inp, residual, weight, eps, *, out=None):
        """residual += all-reduce of inp (in place); returns rmsnorm(residual) * weight (symmem's fused kernel,
        SymmemCommunicator.all_reduce_add_rmsnorm), or None when `inp` is not eligible."""
        if not self.should_all_reduce_add_rmsnorm(inp):
            return None
        return self._inner.all_reduce_add_rmsnorm(inp, residual, weight, eps, out=out)

    def _serve_directly(self, names, bind=True):
        """Once symmem serves the group: the framework's per-call methods become the inner communicator's own
        bound methods (no wrapper frame, and one eligibility check per call instead of two or three: the
        frameworks ask `should_*` before every call, and each wrapper here asked the inner again). That is the
        same answer only when the inner enforces the agreed cap itself, so the cap becomes its max_size.
        `names` maps our method names to the inner's; bind=False only moves the cap (a framework with a
        per-call condition of its own keeps its wrappers). Returns whether the inner now enforces the cap:
        False for anything but symmem's SymmemCommunicator (tests pass stand-ins), which keeps the wrappers.
        close() removes the bindings."""
        inner = self._inner
        if not _is_symmem_communicator(inner) or not 0 < self.max_size <= inner.max_size:
            return False
        inner.max_size = self.max_size
        if bind:
            for ours, theirs in names.items():
                setattr(self, ours, getattr(inner, theirs))
            self._direct = tuple(names)
        return True

    def tune(self, sizes):
        """Measure AUTO's choice at exactly these all-reduce sizes in bytes (SymmemCommunicator.tune): collective,
        never inside a graph capture. A no-op unless symmem serves the group."""
        if self.symmem_serves and _is_symmem_communicator(self._inner):
            self._inner.tune(sizes)

    def close(self):
        for name in self.__dict__.pop("_direct", ()):
            self.__dict__.pop(name, None)
        inner, self._inner = self._inner, None
        if not self.disabled:
            self._disabled_reason = "closed"
        self.disabled = True
        if inner is not None:
            inner.close()

    @property
    def symmem_serves(self):
        """symmem (not the framework's class) serves the group."""
        return self.backend == "symmem" and not self.disabled


def symmem_backed(comm):
    """True when `comm` is a drop-in of this package and symmem (not the framework's class) serves it."""
    return isinstance(comm, DropIn) and comm.symmem_serves


def multicast_missing(device):
    """None when PyTorch's symmetric memory has NVLink multicast on `device` (what SGLang's and vLLM's own
    classes need besides their tables), else why not. Allocates nothing."""
    import torch

    if os.environ.get("TORCH_SYMM_MEM_DISABLE_MULTICAST", "").strip().lower() in ("1", "true", "yes", "on"):
        return "TORCH_SYMM_MEM_DISABLE_MULTICAST is set"
    from torch._C._autograd import DeviceType
    from torch._C._distributed_c10d import _SymmetricMemory

    index = device.index if device.index is not None else torch.cuda.current_device()
    if not _SymmetricMemory.has_multicast_support(DeviceType.CUDA, index):
        return "no multicast support"
    return None


def _is_symmem_communicator(obj):
    try:
        from symmem.torch import SymmemCommunicator
    except ImportError:  # no torch layer: no such communicator either
        return False
    return isinstance(obj, SymmemCommunicator)


def negotiate(group, device, plan):
    """Steps 1-4 of the module docstring. Never raises: every failure becomes backend 'off' with its reason,
    logged once per group (by the group's rank 0; the others log it at DEBUG)."""
    out = Outcome()
    try:
        _negotiate(group, device, plan, out)
    except Exception as e:  # noqa: BLE001 - the frameworks call us with no try/except
        out.backend, out.reason = "off", f"unexpected error: {type(e).__name__}: {e}"
        _release(out)
    _log_outcome(group, device, plan, out)
    return out


def _negotiate(group, device, plan, out):
    import torch.distributed as dist

    out.world_size = dist.get_world_size(group)
    out.rank = dist.get_rank(group)
    if plan.mode == "off":
        out.reason = f"{plan.env_prefix}_MODE=off"
        return
    if out.world_size < 2:
        out.reason = "world size 1"
        return
    if plan.veto:
        out.reason = plan.veto
        return

    facts = _gather(group, out.world_size, _local_facts(device, plan, out.world_size), "symmem-facts")
    if facts is None:
        out.reason = "the CPU group's all_gather_object failed (see the error above)"
        return
    hosts = [f["host"] for f in facts]
    if len(set(hosts)) > 1:
        out.reason = "the group spans hosts (ranks %s are not on rank 0's host); symmem is single-host" % (
            ",".join(str(r) for r, h in enumerate(hosts) if h != hosts[0]))
        return
    bad = [(r, f["why"]) for r, f in enumerate(facts) if f["why"]]
    if bad:
        out.reason = "; ".join(f"rank {r}: {why}" for r, why in bad[:4])
        return
    wires = [f.get("wire", "none") for f in facts]
    if len(set(wires)) > 1:  # ranks running different kernels for one call would time out
        out.reason = "the ranks differ in %s_WIRE (%s)" % (plan.env_prefix, ", ".join(
            f"rank {r}: {w}" for r, w in enumerate(wires)))
        return

    if plan.mode == "fallback" and plan.stock_build and all(f["stock"] for f in facts):
        if _try_stock(group, out, plan):
            return
    _build_symmem(group, device, plan, out)


def _local_facts(device, plan, world_size):
    facts = {"host": host_key(), "why": "", "stock": False, "wire": plan.inner_kwargs.get("wire", "none")}
    try:
        import torch

        if device.type != "cuda":
            facts["why"] = f"device {device} is not a CUDA device"
        elif not torch.cuda.is_available():
            facts["why"] = "CUDA is not available in this process"
        else:
            load_inner_class()
            if plan.mode == "fallback" and plan.stock_probe:
                try:
                    facts["stock"] = plan.stock_probe(device, world_size) is None
                except Exception:  # noqa: BLE001 - no answer means "not known to work"
                    facts["stock"] = False
    except Exception as e:  # noqa: BLE001 - ImportError, OSError (no libsymmem), CUDA errors
        facts["why"] = f"symmem is not usable here: {type(e).__name__}: {e}"
    return facts


def _gather(group, world_size, obj, tag):
    """Every rank's `obj`, or None on failure. Each step tags its payload: a rank that fell out of step
    (and so pairs this gather with another one) yields None, never a misread answer."""
    import torch.distributed as dist

    out = [None] * world_size
    log = logging.getLogger("symmem.integrations")
    try:
        dist.all_gather_object(out, (tag, obj), group=group)
    except Exception as e:  # noqa: BLE001
        log.warning("symmem: all_gather_object on the CPU group failed: %s", e)
        return None
    if not all(isinstance(o, tuple) and len(o) == 2 and o[0] == tag for o in out):
        log.warning("symmem: the ranks are out of step at %s (a rank made another collective call)", tag)
        return None
    return [o[1] for o in out]


def _try_stock(group, out, plan):
    """Build the framework's own class on every rank; keep it only if it came up on all of them."""
    stock, why = None, ""
    try:
        stock = plan.stock_build()
        if getattr(stock, "disabled", True):
            why = "torch's class disabled itself"
    except Exception as e:  # noqa: BLE001
        why = f"torch's class failed: {type(e).__name__}: {e}"
    agreed = _gather(group, out.world_size, why, "symmem-torch-class")
    if agreed is not None and not any(agreed):
        out.backend, out.stock = "torch", stock
        out.max_size = int(getattr(stock, "max_size", 0) or 0)
        return True
    if stock is not None:  # up here but not everywhere: nobody may use it
        stock.disabled = True
        if hasattr(stock, "buffer"):
            stock.buffer = None
    return False


def _free_device_bytes(device):
    import torch

    try:
        return torch.cuda.mem_get_info(device)[0]
    except Exception:  # noqa: BLE001
        return None


def _build_symmem(group, device, plan, out):
    cap, why = 0, ""
    free_before = _free_device_bytes(device)
    capture = _Capture()
    inner_log = logging.getLogger("symmem")
    inner_log.addFilter(capture)
    try:
        out.inner = load_inner_class()(group, device, **plan.inner_kwargs)
    except Exception as e:  # noqa: BLE001
        why = f"symmem init failed: {type(e).__name__}: {e}"
    finally:
        inner_log.removeFilter(capture)
    if out.inner is not None and getattr(out.inner, "disabled", True):
        why = "symmem init failed: " + ("; ".join(capture.messages) or "the communicator disabled itself")
    elif out.inner is not None:
        free_after = _free_device_bytes(device)
        if free_before is not None and free_after is not None:
            out.mem_bytes = max(0, free_before - free_after)
        out.link = getattr(out.inner, "link_class", None)
        cap = int(out.inner.max_size)
        out.cap_source = "the largest message symmem's workspace takes (SYMMEM_WORKSPACE_BYTES)"
        wire = plan.inner_kwargs.get("wire", "none")
        if plan.max_bytes is not None:
            limit, source = plan.max_bytes, f"set by {plan.env_prefix}_MAX_BYTES"
        elif wire != "none":  # the compressed wire is for the large messages the link's bound would hand off
            limit, source = cap, out.cap_source
        else:  # the library's rule for the group's links (symmem_comm_preferred_max_bytes), within max_size
            limit = int(out.inner.preferred_max_size)
            source = f"symmem's bound for {link_name(out.link)} links; {plan.env_prefix}_MAX_BYTES changes it"
        if limit < cap:
            cap, out.cap_source = limit, source
        if cap <= 0:
            why = "size cap 0 (%s)" % (f"{plan.env_prefix}_MAX_BYTES" if plan.max_bytes is not None else
                                       f"link {link_name(out.link)}")
    proposals = _gather(group, out.world_size, (cap if not why else 0, why), "symmem-cap")
    if proposals is None:
        out.reason = "the CPU group's all_gather_object failed after symmem init"
        _release(out)
        return
    agreed = min(p[0] for p in proposals)
    if agreed <= 0:
        out.reason = "; ".join(f"rank {r}: {p[1] or 'size cap 0'}" for r, p in enumerate(proposals) if p[0] <= 0)
        _release(out)
        return
    out.backend, out.max_size = "symmem", agreed


def _release(out):
    inner, out.inner = out.inner, None
    if inner is not None:
        try:
            inner.close()
        except Exception:  # noqa: BLE001
            pass


def _log_outcome(group, device, plan, out):
    name = group_label(group) or "?"
    if out.backend == "symmem":
        mem = f", {human(out.mem_bytes)} of GPU memory taken at init" if out.mem_bytes else ""
        wire = plan.inner_kwargs.get("wire", "none")
        wire_note = (f"; {wire} wire (lossy) from SYMMEM_WIRE_MIN_BYTES on, {plan.env_prefix}_WIRE"
                     if wire != "none" else "")
        msg = (f"symmem: {plan.framework} group '{name}' ({out.world_size} ranks, worst link "
               f"{link_name(out.link)}): symmem all-reduce active up to {human(out.max_size)} "
               f"({out.cap_source}); larger messages take the next backend{wire_note}{mem}")
        level = logging.INFO
    elif out.backend == "torch":
        msg = (f"symmem: {plan.framework} group '{name}' ({out.world_size} ranks): torch symmetric memory works "
               f"here ({plan.env_prefix}_MODE=fallback), so torch's own communicator serves it up to "
               f"{human(out.max_size)}; {plan.env_prefix}_MODE=replace uses symmem instead")
        level = logging.INFO
    else:
        msg = f"symmem: {plan.framework} group '{name}': symmem all-reduce disabled: {out.reason}"
        quiet = out.reason in ("world size 1", f"{plan.env_prefix}_MODE=off", plan.veto)  # chosen, not failed
        level = logging.INFO if quiet else logging.WARNING
    plan.log.log(level if out.rank == 0 else logging.DEBUG, msg)
