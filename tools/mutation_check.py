"""Mutation check: plant known wrong-number bugs in the simulator, one at a time, in a
temporary copy of the tree, and check that the tests meant to guard each one fail.

Each mutant is a small source patch (an exact text in one module and its replacement) plus the
test files (and a ``-k`` selection) that must catch it. The copy is checked unmutated first:
the selected tests must pass there, or a "caught" mutant would prove nothing. A mutant whose
text is no longer in the module is reported as stale (a failure of this check: update the
patch), never silently skipped.

    python3 tools/mutation_check.py            # every mutant
    python3 tools/mutation_check.py -k ormqr   # the mutants whose name contains "ormqr"
    python3 tools/mutation_check.py --list

Exit status 0 when every mutant is caught. The test suite runs this as a slow test
(tests/test_mutation.py, marked ``mutation``, run with GPUMSG_MUTATION=1).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: a fixed seed for the copies' test runs, so that a verdict can be repeated
SEED = os.environ.get("GPUMSG_TEST_SEED", "1729")


@dataclasses.dataclass(frozen=True)
class Mutant:
    """One planted bug: replace ``old`` (which must occur exactly once) by ``new`` in
    ``path``; ``tests`` (pytest arguments: files and options) must then fail."""

    name: str
    what: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]


MUTANTS = (
    Mutant(
        "gemm_f16_accumulation",
        "f16/bf16 GEMM accumulates in the 16-bit type instead of fp32",
        "gpumsg/libs/cublas/_sim.py",
        "        prod = am @ bm\n",
        "        prod = am @ bm\n"
        "        if dtype in (\"f16\", \"bf16\"):\n"
        "            acc = np.zeros((m, n), store)\n"
        "            for p in range(k):\n"
        "                acc = (acc.astype(work) + np.outer(am[:, p], bm[p, :])).astype(store)\n"
        "            prod = acc.astype(work)\n",
        ("tests/libs/cublas/test_options.py", "-k", "half"),
    ),
    Mutant(
        "getrs_batched_c_as_t",
        "batched getrs solves with A^T when asked for A^H",
        "gpumsg/libs/cusolver/_sim.py",
        "                piv = (vector(sim, ipiv + 4 * n * i, n, 1, np.int32) - 1 if ipiv\n"
        "                       else np.arange(n)).astype(np.int32)\n"
        "                x, _ = _lapack(\"getrs\", am)(am, piv, np.array(bm, order=\"F\"),\n"
        "                                            "
        "trans={\"N\": 0, \"T\": 1, \"C\": 2}[trans])\n",
        "                piv = (vector(sim, ipiv + 4 * n * i, n, 1, np.int32) - 1 if ipiv\n"
        "                       else np.arange(n)).astype(np.int32)\n"
        "                x, _ = _lapack(\"getrs\", am)(am, piv, np.array(bm, order=\"F\"),\n"
        "                                            "
        "trans={\"N\": 0, \"T\": 1, \"C\": 1}[trans])\n",
        ("tests/libs/cusolver/test_options.py", "-k", "getrs_batched"),
    ),
    Mutant(
        "ormqr_n_applies_qh",
        "ormqr with trans 'N' (the default) applies Q^H (Q^T) instead of Q",
        "gpumsg/libs/cusolver/_sim.py",
        "                out, _, _ = fn(side, trans, am, tv, np.array(cm, order=\"F\"), lwork)\n",
        "                applied = (\"C\" if t.kind == \"c\" else \"T\") "
        "if trans == \"N\" else trans\n"
        "                out, _, _ = fn(side, applied, am, tv, np.array(cm, order=\"F\"), lwork)\n",
        ("tests/libs/cusolver/test_options.py", "-k", "ormqr"),
    ),
    Mutant(
        "eigh_batched_zero_vectors",
        "batched Jacobi eigensolver returns zero eigenvectors (right eigenvalues)",
        "gpumsg/libs/cusolver/_sim.py",
        "                    self._eigh(dtype, vectors, uplo, n, ai, lda, wi, \"evr\")\n"
        "                    continue\n",
        "                    self._eigh(dtype, vectors, uplo, n, ai, lda, wi, \"evr\")\n"
        "                    matrix(sim, ai, n, n, lda, t)[...] = 0\n"
        "                    continue\n",
        ("tests/libs/cusolver/test_options.py", "-k", "batched and (syevj or eigh)"),
    ),
    Mutant(
        "spsv_spsm_c_as_t",
        "SpSV/SpSM with op 'C' solve with the transpose, not the conjugate transpose",
        "gpumsg/libs/cusparse/_sim.py",
        "        t = _op(tri, op).tocsr()\n",
        "        t = _op(tri, \"T\" if op == \"C\" else op).tocsr()\n",
        ("tests/libs/cusparse/test_options.py", "-k", "spsv or spsm"),
    ),
    Mutant(
        "sddmm_t_conjugates",
        "SDDMM with opa/opb 'T' applies the conjugate transpose",
        "gpumsg/libs/cusparse/_sim.py",
        "    return m if op == \"N\" else m.T if op == \"T\" else m.conj().T\n\n\nclass",
        "    return m if op == \"N\" else m.conj().T\n\n\nclass",
        ("tests/libs/cusparse/test_options.py", "-k", "sddmm"),
    ),
    Mutant(
        "box_muller_pairs_duplicated",
        "Box-Muller writes r cos(theta) twice: x[2i] == x[2i+1]",
        "gpumsg/libs/curand/_sim.py",
        "    out[1::2] = r * np.sin(theta)\n",
        "    out[1::2] = r * np.cos(theta)\n",
        ("tests/libs/curand/test_quality.py", "-k", "normal"),
    ),
    Mutant(
        "f64_uniform_32_bits",
        "f64 uniforms built from one 32-bit word: 32 bits of resolution",
        "gpumsg/libs/curand/_sim.py",
        "            m = w[0::2].astype(np.uint64) << np.uint64(21) | (w[1::2] >> np.uint32(11))\n",
        "            m = w[0::2].astype(np.uint64) << np.uint64(21)\n",
        ("tests/libs/curand/test_quality.py", "-k", "uniform"),
    ),
)


def tree_files(root: str) -> list[str]:
    """The tree's tracked and untracked-but-not-ignored files (what a checkout would hold)."""
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=root,
                         capture_output=True, check=True).stdout
    return [p for p in out.decode().split("\0") if p and os.path.isfile(os.path.join(root, p))]


def copy_tree(root: str, dest: str) -> None:
    for rel in tree_files(root):
        target = os.path.join(dest, rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copy2(os.path.join(root, rel), target)


def run_tests(tree: str, args: tuple[str, ...], timeout: float) -> tuple[int, str]:
    env = dict(os.environ)
    env.update(PYTHONPATH=tree, GPUMSG_TEST_SEED=SEED, PYTHONDONTWRITEBYTECODE="1")
    env.pop("GPUMSG_MUTATION", None)
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-m",
           "not gpu", *args]
    try:
        proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return -1, "timed out"
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    return proc.returncode, lines[-1] if lines else ""


def apply(tree: str, m: Mutant) -> str | None:
    """Plant ``m`` in ``tree``; the reason it cannot be planted, or None."""
    path = os.path.join(tree, m.path)
    if not os.path.exists(path):
        return f"{m.path} does not exist"
    with open(path, encoding="utf-8") as f:
        text = f.read()
    count = text.count(m.old)
    if count != 1:
        return f"the patched text occurs {count} times in {m.path} (expected once)"
    with open(path, "w", encoding="utf-8") as f:
        f.write(text.replace(m.old, m.new))
    return None


def check(mutants: tuple[Mutant, ...], timeout: float = 600, log=print) -> dict[str, str]:
    """Run every mutant; a verdict per name: "caught", "survived", "stale: ..." or
    "baseline failed: ..."."""
    verdicts: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="gpumsg-mutation-") as tmp:
        clean = os.path.join(tmp, "clean")
        copy_tree(ROOT, clean)
        for m in mutants:
            t0 = time.perf_counter()
            rc, tail = run_tests(clean, m.tests, timeout)
            if rc != 0:
                verdicts[m.name] = f"baseline failed (rc {rc}): {tail}"
                log(f"{m.name:32s} BASELINE FAILED  {tail}")
                continue
            work = os.path.join(tmp, m.name)
            shutil.copytree(clean, work)
            why = apply(work, m)
            if why is not None:
                verdicts[m.name] = f"stale: {why}"
                log(f"{m.name:32s} STALE  {why}")
                continue
            rc, tail = run_tests(work, m.tests, timeout)
            # pytest: 1 = some test failed (caught); 0 = all passed (survived); anything else
            # (collection error, crash, timeout) is no verdict on the tests
            verdict = "caught" if rc == 1 else "survived" if rc == 0 else \
                f"error (rc {rc}): {tail}"
            verdicts[m.name] = verdict
            log(f"{m.name:32s} {verdict.upper():9s} {time.perf_counter() - t0:5.1f} s  "
                f"{m.what}  [{tail}]")
            shutil.rmtree(work, ignore_errors=True)
    return verdicts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-k", default="", help="only the mutants whose name contains this")
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per test run")
    opts = ap.parse_args(argv)
    chosen = tuple(m for m in MUTANTS if opts.k in m.name)
    if opts.list:
        for m in chosen:
            print(f"{m.name:32s} {m.path}: {m.what}  -> {' '.join(m.tests)}")
        return 0
    print(f"mutation check: {len(chosen)} mutants, test seed {SEED}")
    verdicts = check(chosen, opts.timeout)
    caught = sum(v == "caught" for v in verdicts.values())
    print(f"caught {caught} of {len(chosen)}")
    return 0 if caught == len(chosen) else 1


if __name__ == "__main__":
    sys.exit(main())
