"""Full-vector vs locally-compacted CSR logistic SGD on one worker (mpikanel kernels).

(a) full      : logistic.sgd_step_csr on the full w for each minibatch (current code).
(a+) full+trk : (a) plus the KeyTracker work the current worker does for sparse pushes
                (mark_csr_keys per step, np.sort + unmark of the keys at each push).
(b) compacted : per push interval of H minibatches: unique touched columns, CSR of those rows
                with remapped (local) column ids, w_local = w[cols] (+ bias), the same kernel on
                w_local, scatter w[cols] = w_local at push. All remap/gather/scatter timed.
    b-numba   : numba marking kernel, one pass (int32 map d-long, first-seen local ids written
                straight into the local indices; cols unsorted)
    b-numba-pf: b-numba with software prefetch (rows ahead, as the kernel; cmap entries 4 rows ahead)
    b-numba-pf+sortkeys: b-numba-pf plus np.sort of the interval's keys (what a sparse push needs;
                compare with full+track)
    b-numsort : numba marking, then cols sorted (push needs sorted keys) and local ids re-assigned
    b-unique  : np.unique(return_inverse=True) on the rows' concatenated indices (sorted cols)

fused-*       : the same loops inside one numba call per pass (no per-step Python dispatch);
fused-remap-only(-pf): fused-b-numba(-pf) without the kernel steps (remap + label gather + w gather/scatter).
Timing: wall (perf_counter) and process CPU time (process_time), best of --reps, interleaved.

Usage: python docs/results/csr-compact/compact_bench.py [--out results.json] [--reps 3]   (from the checkout)
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

os.environ.setdefault("NUMBA_CACHE_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), ".numba_cache"))
from numba import njit

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
from mpikanel import data as mdata  # noqa: E402
from mpikanel.kernels import logistic  # noqa: E402
from mpikanel.kernels._linear import LOGISTIC, csr_step, mark_csr_keys  # noqa: E402
from mpikanel.kernels._intrinsics import PREFETCH_ROWS, prefetch_span  # noqa: E402

ROWS, NNZ, ALPHA, BATCH, LR, L2 = 20_000, 50, 1.1, 64, 0.25, 0.0
DS = (1_000_000, 10_000_000)
HS = (1, 4, 16)
SEED = 0


def load(d):
    spec = mdata.DataSpec(source="synthetic-sparse", synthetic_rows=ROWS, synthetic_features=d,
                          sparse_nnz=NNZ, sparse_alpha=ALPHA, sparse_values="binary", seed=SEED,
                          test_fraction=0.0)
    info = mdata.describe(spec)
    sh = mdata.load_rows(spec, info, 0, min(ROWS, info.n_rows))
    return sh.X, sh.y.astype(np.int64)


# ----------------------------------------------------------------------------- compaction kernels

@njit(cache=True, nogil=True)
def compact_numba(indptr, indices, data, rows, cmap, cols, lptr, lind, ldat, sort_cols):
    """Local CSR of `rows` (in order) with column ids remapped to 0..m-1; returns m.
    cmap (int32, d long, all -1 on entry) is restored to -1 by scatter_back."""
    m = 0
    q = 0
    lptr[0] = 0
    if not sort_cols:  # one pass: local id assigned at first sight, written straight into lind
        for k in range(rows.shape[0]):
            i = rows[k]
            for p in range(indptr[i], indptr[i + 1]):
                c = indices[p]
                j = cmap[c]
                if j < 0:
                    j = m
                    cmap[c] = m
                    cols[m] = c
                    m += 1
                lind[q] = j
                ldat[q] = data[p]
                q += 1
            lptr[k + 1] = q
        return m
    for k in range(rows.shape[0]):
        i = rows[k]
        for p in range(indptr[i], indptr[i + 1]):
            c = indices[p]
            if cmap[c] < 0:
                cmap[c] = m
                cols[m] = c
                m += 1
        lptr[k + 1] = lptr[k] + (indptr[i + 1] - indptr[i])
    cols[:m].sort()
    for j in range(m):
        cmap[cols[j]] = j
    for k in range(rows.shape[0]):
        i = rows[k]
        for p in range(indptr[i], indptr[i + 1]):
            lind[q] = cmap[indices[p]]
            ldat[q] = data[p]
            q += 1
    return m


@njit(cache=True, nogil=True)
def compact_pf(indptr, indices, data, rows, cmap, cols, lptr, lind, ldat):
    """compact_numba's one-pass (unsorted) remap with software prefetch: the CSR rows 8 ahead
    (indptr 16 ahead, as the kernel does) and the cmap entries of the row 4 ahead."""
    nr = rows.shape[0]
    m = 0
    q = 0
    lptr[0] = 0
    for k in range(min(2 * PREFETCH_ROWS, nr)):
        prefetch_span(indptr, rows[k], rows[k] + 2)
    for k in range(min(PREFETCH_ROWS, nr)):
        prefetch_span(indices, indptr[rows[k]], indptr[rows[k] + 1])
        prefetch_span(data, indptr[rows[k]], indptr[rows[k] + 1])
    for k in range(nr):
        if k + 2 * PREFETCH_ROWS < nr:
            i2 = rows[k + 2 * PREFETCH_ROWS]
            prefetch_span(indptr, i2, i2 + 2)
        if k + PREFETCH_ROWS < nr:
            i1 = rows[k + PREFETCH_ROWS]
            prefetch_span(indices, indptr[i1], indptr[i1 + 1])
            prefetch_span(data, indptr[i1], indptr[i1 + 1])
        if k + PREFETCH_ROWS // 2 < nr:
            i0 = rows[k + PREFETCH_ROWS // 2]
            for p in range(indptr[i0], indptr[i0 + 1]):
                c = indices[p]
                prefetch_span(cmap, c, c + 1)
        i = rows[k]
        for p in range(indptr[i], indptr[i + 1]):
            c = indices[p]
            j = cmap[c]
            if j < 0:
                j = m
                cmap[c] = m
                cols[m] = c
                m += 1
            lind[q] = j
            ldat[q] = data[p]
            q += 1
        lptr[k + 1] = q
    return m


@njit(cache=True, nogil=True)
def gather_rows_csr(indptr, indices, data, rows, lptr, gind, ldat):
    """CSR of `rows` with global column ids (for the np.unique path); returns nnz."""
    q = 0
    lptr[0] = 0
    for k in range(rows.shape[0]):
        i = rows[k]
        for p in range(indptr[i], indptr[i + 1]):
            gind[q] = indices[p]
            ldat[q] = data[p]
            q += 1
        lptr[k + 1] = q
    return q


@njit(cache=True, nogil=True)
def gather_w(w, cols, m, d, wl):
    for j in range(m):
        wl[j] = w[cols[j]]
    wl[m] = w[d]


@njit(cache=True, nogil=True)
def scatter_back(w, cols, m, d, wl, cmap, reset):
    for j in range(m):
        w[cols[j]] = wl[j]
        if reset:
            cmap[cols[j]] = -1
    w[d] = wl[m]


# ----------------------------------------------------------------------------- fused (one numba call per pass)
# Same work as run_full / run_compact but the loop over minibatches is inside numba, so the
# Python-side dispatch per step / per interval (which the worker pays) is taken out: the pure
# memory-access + remap cost.

@njit(cache=True, nogil=True)
def fused_full(w, indptr, indices, data, d, y, perm, nb, scratch):
    n = perm.shape[0]
    for s in range(0, n, nb):
        csr_step(w, indptr, indices, data, d, y, perm[s:min(s + nb, n)], 0.25, 0.0, 2, scratch, LOGISTIC)


@njit(cache=True, nogil=True)
def fused_compact(w, indptr, indices, data, d, y, perm, nb, H, mode,
                  cmap, cols, lptr, lind, ldat, wl, scratch, yl, ar, run_kernel=True):
    n = perm.shape[0]
    span = nb * H
    for s in range(0, n, span):
        rows = perm[s:min(s + span, n)]
        nr = rows.shape[0]
        if mode == 2:
            m = compact_pf(indptr, indices, data, rows, cmap, cols, lptr, lind, ldat)
        else:
            m = compact_numba(indptr, indices, data, rows, cmap, cols, lptr, lind, ldat, mode == 1)
        for k in range(nr):
            yl[k] = y[rows[k]]
        gather_w(w, cols, m, d, wl)
        wv = wl[:m + 1]
        for o in range(0, nr if run_kernel else 0, nb):
            csr_step(wv, lptr, lind, ldat, m, yl, ar[o:min(o + nb, nr)], 0.25, 0.0, 2, scratch, LOGISTIC)
        scatter_back(w, cols, m, d, wl, cmap, True)


# ----------------------------------------------------------------------------- variants

def batches(perm):
    return [perm[s:s + BATCH] for s in range(0, perm.size, BATCH)]


def run_full(w, X, y, bl, scratch):
    ip, ind, dat, d = X.indptr, X.indices, X.data, X.shape[1]
    step = logistic.sgd_step_csr
    t = time.perf_counter()
    for idx in bl:
        step(w, ip, ind, dat, d, y, idx, LR, L2, 2, scratch)
    return time.perf_counter() - t


def run_full_track(w, X, y, bl, H, scratch, mark, keys):
    ip, ind, dat, d = X.indptr, X.indices, X.data, X.shape[1]
    step = logistic.sgd_step_csr
    n = 0
    t = time.perf_counter()
    for b, idx in enumerate(bl):
        step(w, ip, ind, dat, d, y, idx, LR, L2, 2, scratch)
        n = mark_csr_keys(ip, ind, idx, 1, d, mark, keys, n)
        if (b + 1) % H == 0 or b + 1 == len(bl):
            k = np.sort(keys[:n])          # KeyTracker.take
            mark[k] = False
            n = 0
    return time.perf_counter() - t


def run_compact(w, X, y, bl, H, how, bufs, sortkeys=False):
    ip, ind, dat, d = X.indptr, X.indices, X.data, X.shape[1]
    cmap, cols, lptr, lind, ldat, wl, scratch, gind = bufs
    step = logistic.sgd_step_csr
    t = time.perf_counter()
    for s in range(0, len(bl), H):
        group = bl[s:s + H]
        rows = np.concatenate(group) if len(group) > 1 else group[0]
        nr = rows.size
        if how == "unique":
            nnz = gather_rows_csr(ip, ind, dat, rows, lptr, gind, ldat)
            ucols, inv = np.unique(gind[:nnz], return_inverse=True)
            m = ucols.size
            li = inv.astype(np.int32)
            cl = ucols
            reset = False
        elif how == "numba-pf":
            m = compact_pf(ip, ind, dat, rows, cmap, cols, lptr, lind, ldat)
            nnz = lptr[nr]
            li = lind
            cl = cols
            reset = True
        else:
            m = compact_numba(ip, ind, dat, rows, cmap, cols, lptr, lind, ldat, how == "numsort")
            nnz = lptr[nr]
            li = lind
            cl = cols
            reset = True
        gather_w(w, cl, m, d, wl)
        wv = wl[:m + 1]
        lp = lptr[:nr + 1]
        yl = y[rows]
        o = 0
        for idx in group:
            nb = idx.size
            step(wv, lp, li, ldat, m, yl, _ar[o:o + nb], LR, L2, 2, scratch)
            o += nb
        scatter_back(w, cl, m, d, wl, cmap, reset)
        if sortkeys:
            np.sort(cl[:m])  # the sorted keys a sparse push sends (KeyTracker.take's np.sort)
    return time.perf_counter() - t


_ar = np.arange(BATCH * 16, dtype=np.int64)


def make_bufs(d, maxrows, maxnnz):
    return (np.full(d, -1, dtype=np.int32), np.empty(maxnnz, dtype=np.int64),
            np.empty(maxrows + 1, dtype=np.int64), np.empty(maxnnz, dtype=np.int32),
            np.empty(maxnnz, dtype=np.float32), np.empty(maxnnz + 1, dtype=np.float64),
            np.empty(BATCH + 8, dtype=np.float64), np.empty(maxnnz, dtype=np.int32))


def loadavg():
    out = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    return out, os.getloadavg()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results.json"))
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    res = {"config": dict(rows=ROWS, nnz=NNZ, alpha=ALPHA, batch=BATCH, lr=LR, l2=L2, seed=SEED,
                          ds=DS, Hs=HS, reps=a.reps, timing="best of reps, time.perf_counter"),
           "uptime_before": loadavg()}
    print(res["uptime_before"][0], flush=True)
    out = {}
    for d in DS:
        t0 = time.perf_counter()
        X, y = load(d)
        print(f"d={d}: {X.shape[0]} rows, nnz/row={X.nnz / X.shape[0]:.1f}, load {time.perf_counter() - t0:.1f}s",
              flush=True)
        n = X.shape[0]
        perm = np.random.default_rng([SEED, 7]).permutation(n).astype(np.int64)
        bl = batches(perm)
        w0 = np.random.default_rng([SEED, 12345]).normal(0, 0.01, d + 1)
        scratch = np.empty(logistic.scratch_size(BATCH, 2), dtype=np.float64)  # kernel uses nb+2
        rownnz = np.diff(X.indptr)
        maxnnz = int(np.sort(rownnz)[-BATCH * 16:].sum()) + 1
        bufs = make_bufs(d, BATCH * 16, maxnnz)
        mark = np.zeros(d + 1, dtype=np.bool_)
        keys = np.empty(d + 1, dtype=np.int64)
        # stats: distinct columns per push interval
        stats = {}
        for H in HS:
            ms = []
            for s in range(0, len(bl), H):
                rows = np.concatenate(bl[s:s + H])
                ms.append(np.unique(X.indices[np.concatenate([np.arange(X.indptr[i], X.indptr[i + 1])
                                                              for i in rows])]).size)
                stats[H] = dict(mean_cols=float(np.mean(ms)), mean_nnz=float(rownnz.mean() * BATCH * H))
        yl = np.empty(BATCH * 16, dtype=np.int64)
        cmap, cols, lptr, lind, ldat, wl, _, _ = bufs

        def call(name, w, H):
            if name == "full":
                return run_full(w, X, y, bl, scratch)
            if name == "full+track":
                return run_full_track(w, X, y, bl, H, scratch, mark, keys)
            if name == "b-numba-pf+sortkeys":
                return run_compact(w, X, y, bl, H, "numba-pf", bufs, True)
            if name.startswith("b-"):
                return run_compact(w, X, y, bl, H, name[2:], bufs)
            t = time.perf_counter()
            if name == "fused-full":
                fused_full(w, X.indptr, X.indices, X.data, d, y, perm, BATCH, scratch)
            else:
                fused_compact(w, X.indptr, X.indices, X.data, d, y, perm, BATCH, H,
                              1 if name == "fused-b-numsort" else 2 if name.endswith("-pf") else 0,
                              cmap, cols, lptr, lind, ldat, wl, scratch, yl, _ar, "remap-only" not in name)
            return time.perf_counter() - t

        names = ["full", "full+track", "b-numba", "b-numba-pf", "b-numba-pf+sortkeys", "b-numsort", "b-unique",
                 "fused-full", "fused-b-numba", "fused-b-numba-pf", "fused-b-numsort", "fused-remap-only",
                 "fused-remap-only-pf"]
        # warm-up (numba compile / cache load) on a short prefix
        bl_all, perm_all = bl, perm
        bl, perm = bl_all[:20], perm_all[:20 * BATCH]
        for H in HS:
            for name in names:
                call(name, w0.copy(), H)
        bl, perm = bl_all, perm_all
        # correctness: every variant vs (a) full on one whole pass
        check = {}
        wa = w0.copy()
        call("full", wa, 1)
        for H in HS:
            for name in [v for v in names[1:] if "remap-only" not in v]:
                wb = w0.copy()
                call(name, wb, H)
                check[f"H{H}-{name}"] = dict(allclose_1e12=bool(np.allclose(wa, wb, rtol=0, atol=1e-12)),
                                             max_abs_diff=float(np.max(np.abs(wa - wb))),
                                             bitwise_equal=bool(np.array_equal(wa, wb)))
        assert all(v["allclose_1e12"] for v in check.values()), check
        print("  check: all allclose(atol=1e-12):", all(v["allclose_1e12"] for v in check.values()),
              " max |diff|:", max(v["max_abs_diff"] for v in check.values()), flush=True)
        # timed, interleaved (order reversed on odd repeats)
        times: dict = {}
        cpus: dict = {}
        for r in range(a.reps):
            for H in HS:
                order = names if r % 2 == 0 else names[::-1]
                for name in order:
                    w = w0.copy()
                    c0 = time.process_time()
                    dt = call(name, w, H)
                    ct = time.process_time() - c0
                    times.setdefault(H, {}).setdefault(name, []).append(dt)
                    cpus.setdefault(H, {}).setdefault(name, []).append(ct)
        rd = {}
        for H in HS:
            row = {"distinct_cols_per_push": stats[H]["mean_cols"],
                   "nnz_per_push": stats[H]["mean_nnz"]}
            for name, ts in times[H].items():
                row[name] = dict(best_s=min(ts), all_s=ts, samples_per_s=n / min(ts),
                                 cpu_all_s=cpus[H][name], cpu_samples_per_s=n / min(cpus[H][name]))
            for name in times[H]:
                base = row["fused-full" if name.startswith("fused") else "full"]["samples_per_s"]
                row[name]["ratio_vs_full"] = row[name]["samples_per_s"] / base
            rd[H] = row
            print(f"  H={H:2d} m~{stats[H]['mean_cols']:.0f}: " + "  ".join(
                f"{k}={row[k]['samples_per_s'] / 1e6:.2f}M/s({row[k]['ratio_vs_full']:.2f};cpu {row[k]['cpu_samples_per_s'] / 1e6:.2f})"
                for k in times[H]),
                flush=True)
        out[d] = dict(results=rd, check=check)
        del X, y, bufs, mark, keys
    res["runs"] = out
    res["uptime_after"] = loadavg()
    print(res["uptime_after"][0], flush=True)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
