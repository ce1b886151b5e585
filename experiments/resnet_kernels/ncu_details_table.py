#!/usr/bin/python3
"""What bounds each kernel of an ncu_details.sh CSV (gzip), one line per kernel in launch order.

  ncu_details_table.py vgg16_b64_details.csv.gz

Columns: launch index, duration (us), the SM's and memory's throughput (% of peak), DRAM and
L1 (shared memory included) throughput, the wgmma pipe's active share, registers per thread,
achieved occupancy (warps), warp cycles per issued instruction, the four largest stall
reasons (warps stalled per issued instruction), grid, and the kernel (template arguments name
the tile: WgTile<consumer warpgroups in M, in N, BN, stages, ...>).
"""
import collections, csv, gzip, re, sys

def load(path):
    lines = [l for l in gzip.open(path, "rt") if l.startswith('"')]
    rows = list(csv.reader(lines))
    h = rows[0]
    col = {k: h.index(k) for k in ("ID", "Kernel Name", "Grid Size", "Metric Name", "Metric Value")}
    kernels = collections.OrderedDict()
    for r in rows[1:]:
        if r[0] == "ID":
            continue
        k = kernels.setdefault(r[col["ID"]], {"name": r[col["Kernel Name"]], "grid": r[col["Grid Size"]], "m": {}})
        v = r[col["Metric Value"]].replace(",", "")
        try:
            k["m"][r[col["Metric Name"]]] = float(v)
        except ValueError:
            k["m"][r[col["Metric Name"]]] = v
    return kernels

def short(n):
    n = re.sub(r"colonnade::(cuda::)?(conv::)?(<unnamed>::)?", "", n)
    n = re.sub(r"\(WgArgs.*$", "", n)
    return n.replace("void ", "").replace("__nv_bfloat16", "bf16")[:60]

def get(m, *names):
    for n in names:
        if n in m and isinstance(m[n], float):
            return m[n]
    return float("nan")

def main():
    kernels = load(sys.argv[1])
    print(f"{'#':>3} {'us':>8} {'SM%':>5} {'mem%':>5} {'dram%':>5} {'L1%':>5} {'gmma%':>5} {'regs':>4} "
          f"{'occ':>5} {'cpi':>5}  stalls (warps per issue)  grid  kernel")
    for i, (kid, k) in enumerate(kernels.items()):
        m = k["m"]
        dur = get(m, "Duration") / 1e3  # base units: ns
        stalls = sorted(((v, re.sub(r"smsp__average_warps_issue_stalled_|_per_issue_active\.ratio", "", n))
                         for n, v in m.items() if n.startswith("smsp__average_warps_issue_stalled_")
                         and isinstance(v, float)), reverse=True)[:4]
        st = " ".join(f"{n}={v:.2f}" for v, n in stalls)
        print(f"{i:3d} {dur:8.1f} {get(m, 'Compute (SM) Throughput'):5.1f} {get(m, 'Memory Throughput'):5.1f} "
              f"{get(m, 'DRAM Throughput'):5.1f} {get(m, 'L1/TEX Cache Throughput'):5.1f} "
              f"{get(m, 'sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active'):5.1f} "
              f"{get(m, 'Registers Per Thread'):4.0f} {get(m, 'Achieved Active Warps Per SM'):5.1f} "
              f"{get(m, 'Warp Cycles Per Issued Instruction'):5.1f}  {st}  {k['grid']}  {short(k['name'])}")

if __name__ == "__main__":
    main()
