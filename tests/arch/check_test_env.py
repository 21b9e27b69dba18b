#!/usr/bin/env python3
"""Every GPU test of the build runs in the test environment (SYMMEM_TEST_ENV, the top-level CMakeLists.txt):
NVLink multicast off (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1), and
SYMMEM_TOPO_CACHE_DIR inside the build tree, so that what the tests' communicators measure at their first init
(the topology, the autotuned algorithm table) in the tests' conditions (ranks as threads of one process, other
tests' work on the GPU) is never written where a user's programs load it from (~/.cache/symmem).

Reads the tests from `ctest --show-only=json-v1` in BUILD_DIR (or from a JSON file with --json) and prints every
GPU test (label gpu) that lacks one of them; exits 1 if there is any.

  check_test_env.py [--ctest CTEST] BUILD_DIR
  check_test_env.py --json FILE BUILD_DIR
  check_test_env.py --self-test
"""
import argparse
import json
import os
import subprocess
import sys

MULTICAST_OFF = ("NCCL_NVLS_ENABLE=0", "TORCH_SYMM_MEM_DISABLE_MULTICAST=1", "NVSHMEM_DISABLE_NVLS=1")
CACHE = "SYMMEM_TOPO_CACHE_DIR"


def _props(test):
    return {p["name"]: p["value"] for p in test.get("properties", [])}


def _is_gpu(props):
    return "gpu" in (props.get("LABELS") or [])


def problems(tests, build_dir):
    """(name, what is wrong) for every GPU test outside the test environment."""
    build = os.path.realpath(build_dir)
    out = []
    for t in tests:
        props = _props(t)
        if not _is_gpu(props):
            continue
        env = props.get("ENVIRONMENT") or []
        env = [env] if isinstance(env, str) else env
        for want in MULTICAST_OFF:
            if want not in env:
                out.append((t["name"], f"{want} is not in its ENVIRONMENT"))
        cache = [e.split("=", 1)[1] for e in env if e.startswith(CACHE + "=")]
        if not cache:
            out.append((t["name"], f"no {CACHE}: its communicators would write into the user's cache folder"))
        elif os.path.commonpath([os.path.realpath(cache[-1]), build]) != build:
            out.append((t["name"], f"{CACHE}={cache[-1]} is outside the build tree {build}"))
    return out


def load(build_dir, json_file, ctest):
    if json_file:
        with open(json_file) as f:
            return json.load(f)["tests"]
    r = subprocess.run([ctest, "--show-only=json-v1", "--test-dir", build_dir], capture_output=True, text=True,
                       check=True)
    return json.loads(r.stdout)["tests"]


def self_test():
    build = "/b/build"
    good_env = list(MULTICAST_OFF) + [f"{CACHE}={build}/test-cache"]

    def test(name, labels, env):
        props = [{"name": "LABELS", "value": labels}]
        if env is not None:
            props.append({"name": "ENVIRONMENT", "value": env})
        return {"name": name, "properties": props}

    cases = [
        (test("ok", ["coll", "gpu"], good_env), 0),
        (test("cpu_only", ["cpu"], None), 0),
        (test("no_env", ["gpu"], None), 4),
        (test("no_cache", ["gpu", "inproc"], list(MULTICAST_OFF)), 1),
        (test("home_cache", ["gpu"], list(MULTICAST_OFF) + [f"{CACHE}=/home/u/.cache/symmem"]), 1),
        (test("sibling_cache", ["gpu"], list(MULTICAST_OFF) + [f"{CACHE}=/b/build2/test-cache"]), 1),
        (test("multicast_on", ["gpu"], [e for e in good_env if not e.startswith("NCCL_NVLS")]), 1),
        (test("string_env", ["gpu"], "NCCL_NVLS_ENABLE=0"), 3),
    ]
    bad = 0
    for t, want in cases:
        got = len(problems([t], build))
        if got != want:
            print(f"check_test_env self-test: {t['name']}: {got} problem(s), expected {want}")
            bad += 1
    print(f"check_test_env self-test: {len(cases) - bad} of {len(cases)} cases as expected")
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build_dir", nargs="?")
    ap.add_argument("--json", default="", help="the output of ctest --show-only=json-v1, instead of running it")
    ap.add_argument("--ctest", default="ctest", help="the ctest to list the tests with (default: ctest on PATH)")
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    if not a.build_dir:
        ap.error("BUILD_DIR is required")
    tests = load(a.build_dir, a.json, a.ctest)
    found = problems(tests, a.build_dir)
    for name, what in found:
        print(f"{name}: {what}")
    gpu = sum(_is_gpu(_props(t)) for t in tests)
    print(f"check_test_env: {gpu} GPU tests of {len(tests)}, {len(found)} problem(s)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
