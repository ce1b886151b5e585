#!/usr/bin/python3
"""What bounds each kernel of ncu_details.sh's CSVs (gzip), one line per kernel in launch order.

  ncu_details_table.py vgg16_b64_details.csv.gz [vgg16_b64_details_raw.csv.gz]

Columns (details page): launch index, duration (us, at ncu's fixed clocks), the SM's issue
slots busy and the SOL memory throughput (% of peak), DRAM and L1 (shared memory included)
throughput, registers per thread, achieved active warps per SM, warp cycles per issued
instruction, grid, kernel (WgTile<warpgroups in M, in N, BN, stages, ...>). With the raw page
(same kernels, same order): the tensor (wgmma) pipe's and the ALU's share of active cycles and
the four largest stall reasons in warps per issued instruction.
"""
import collections, csv, gzip, re, sys

def rows_of(path):
    return list(csv.reader(l for l in gzip.open(path, "rt") if l.startswith('"')))

def load_details(path):
    rows = rows_of(path)
    h = rows[0]
    col = {k: h.index(k) for k in ("ID", "Kernel Name", "Grid Size", "Section Name", "Metric Name",
                                   "Metric Value")}
    kernels = collections.OrderedDict()
    for r in rows[1:]:
        if r[0] == "ID" or len(r) <= col["Metric Value"]:
            continue
        k = kernels.setdefault(r[col["ID"]], {"name": r[col["Kernel Name"]],
                                             "grid": r[col["Grid Size"]], "m": {}})
        try:
            v = float(r[col["Metric Value"]].replace(",", ""))
        except ValueError:
            continue
        k["m"].setdefault(r[col["Section Name"]] + ": " + r[col["Metric Name"]], v)
    return list(kernels.values())

def load_raw(path):
    """--page raw: a header of metric names, a row of units, then one row per kernel."""
    rows = rows_of(path)
    h = rows[0]
    out = []
    for r in rows[1:]:
        if not r or not r[0].strip().isdigit():
            continue  # the units row
        m = {}
        for name, v in zip(h, r):
            try:
                m[name] = float(v.replace(",", ""))
            except ValueError:
                pass
        out.append(m)
    return out

def short(n):
    n = re.sub(r"\(anonymous namespace\)::", "", n).replace("unnamed>::", "")  # ncu: "unnamed>::"
    n = re.sub(r"colonnade::(cuda::)?(conv::)?", "", n)
    n = re.sub(r"\(WgArgs.*$", "", n)
    return n.replace("void ", "").replace("__nv_bfloat16", "bf16")[:64]

TENSOR_PIPE = r"^sm__pipe_tensor_cycles_active\.avg\.pct_of_peak_sustained_active$"
ALU_PIPE = r"^sm__pipe_alu_cycles_active\.avg\.pct_of_peak_sustained_active$"

def get(m, key):
    return m.get(key, float("nan"))

def pick(m, pattern):
    """The first metric whose name matches pattern."""
    for n, v in m.items():
        if re.search(pattern, n):
            return v
    return float("nan")

def main():
    ks = load_details(sys.argv[1])
    raw = load_raw(sys.argv[2]) if len(sys.argv) > 2 else []
    sol = "GPU Speed Of Light Throughput: "
    print(f"{'#':>3} {'us':>8} {'issue%':>6} {'mem%':>5} {'dram%':>5} {'L1%':>5} {'regs':>4} "
          f"{'warps':>5} {'cpi':>5}" + (f" {'tc%':>5} {'alu%':>5}  stalls (warps per issue)" if raw else "")
          + "  grid  kernel")
    for i, k in enumerate(ks):
        m = k["m"]
        line = (f"{i:3d} {get(m, sol + 'Duration') / 1e3:8.1f} "
                f"{get(m, 'Compute Workload Analysis: Issue Slots Busy'):6.1f} "
                f"{get(m, sol + 'Memory Throughput'):5.1f} {get(m, sol + 'DRAM Throughput'):5.1f} "
                f"{get(m, sol + 'L1/TEX Cache Throughput'):5.1f} "
                f"{get(m, 'Launch Statistics: Registers Per Thread'):4.0f} "
                f"{get(m, 'Occupancy: Achieved Active Warps Per SM'):5.1f} "
                f"{get(m, 'Warp State Statistics: Warp Cycles Per Issued Instruction'):5.1f}")
        if i < len(raw):
            r = raw[i]
            stalls = sorted(((v, re.sub(r"^smsp__average_warp(s|_latency)_issue_stalled_|_per_issue_active|\.ratio$", "", n))
                             for n, v in r.items()
                             if re.match(r"smsp__average_warps?_(latency_)?issue_stalled_.*per_issue_active\.ratio$", n)),
                            reverse=True)[:4]
            tc = pick(r, TENSOR_PIPE)
            alu = pick(r, ALU_PIPE)
            line += f" {tc:5.1f} {alu:5.1f}  " + " ".join(f"{n}={v:.2f}" for v, n in stalls)
        print(line + f"  {k['grid']}  {short(k['name'])}")

if __name__ == "__main__":
    main()
