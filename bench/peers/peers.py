#!/usr/bin/env python3
"""bench/peers/peers.py: the figures of bench/peers (python3, stdlib only).

  peers.py latency ACKS STARTS
      ACKS and STARTS hold "seq ns" lines (CLOCK_MONOTONIC): the producer's
      acknowledged commits and the handlers' starts. Prints
      "n N started S p50_ms A p95_ms B p99_ms C max_ms D": nearest-rank
      percentiles over every acknowledged job, where a job that never
      started counts as infinitely late ("inf").
  peers.py hops HOPS
      HOPS holds a2-bench-peers work --hops lines ("seq commit sent read
      push woken pick start", µs since the Unix epoch). Prints one line per
      hop (commit -> walsender send -> a2-consumer read -> frame to the
      socket -> worker read -> handler start, that last one split at the
      slot's take of the session from the queue, and commit -> handler
      start):
      "hop NAME n N p50_ms A p99_ms B max_ms C".
  peers.py delayed DUE STARTS DRAIN_S
      DUE holds "seq due_ms" (epoch ms) for every acknowledged job, STARTS
      "seq start_ns" (CLOCK_REALTIME). Prints "n N started S p50_ms A
      p99_ms B max_ms C min_ms D early E": lateness = start - due,
      nearest-rank percentiles over every acknowledged job, where a job that
      never started, or started more than DRAIN_S seconds after its due
      time, counts as infinitely late ("inf"); early: jobs started before
      their due time (min_ms < 0: by how much; they count as measured).
  peers.py burn STARTS
      Prints "n N elapsed_s T per_s R": the handlers' starts from the first
      to the last, (N - 1) / T.
  peers.py report RAW CSV SVG
      RAW holds "pass cell system metric value" lines (tab-separated).
      Prints the table (medians over the passes, each peer also as a ratio
      to a2), the delayed cell's target line and the pass-to-pass spread,
      writes CSV and draws SVG. Cells missing from RAW (a run of some cells,
      PEERS_CELLS) keep their rows of the CSV already there, in the CSV and
      the SVG; the table shows this run's cells only.
"""
import csv
import math
import statistics
import sys
from xml.sax.saxutils import escape

SYSTEMS = [("a2", "a2"), ("graphile_defaults", "Graphile defaults"),
           ("graphile_batched", "Graphile batched"),
           ("pgboss_defaults", "pg-boss defaults"),
           ("pgboss_tuned", "pg-boss tuned")]


def read_times(path):
    out = {}
    try:
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2:
                    out.setdefault(int(parts[0]), int(parts[1]))
    except OSError:
        pass
    return out


def nearest_rank(vals, p):
    return vals[max(0, math.ceil(p * len(vals)) - 1)] if vals else None


def fmt_ms(v):
    if v is None:
        return "-"
    return "inf" if v == math.inf else f"{v:.3f}"


def latency(acks_path, starts_path):
    acks, starts = read_times(acks_path), read_times(starts_path)
    lat = []
    for seq, ack in acks.items():
        st = starts.get(seq)
        lat.append(math.inf if st is None else max(0, st - ack) / 1e6)
    lat.sort()
    started = sum(1 for v in lat if v != math.inf)
    print(f"n {len(lat)} started {started} "
          f"p50_ms {fmt_ms(nearest_rank(lat, 0.50))} "
          f"p95_ms {fmt_ms(nearest_rank(lat, 0.95))} "
          f"p99_ms {fmt_ms(nearest_rank(lat, 0.99))} "
          f"max_ms {fmt_ms(lat[-1] if lat else None)}")


HOPS = [("commit->walsender_send", 0, 1), ("walsender_send->consumer_read", 1, 2),
        ("consumer_read->socket", 2, 3), ("socket->worker_read", 3, 4),
        ("worker_read->handler_start", 4, 6), ("worker_read->slot_take", 4, 5),
        ("slot_take->handler_start", 5, 6), ("commit->handler_start", 0, 6)]


def hops(path):
    rows = []
    try:
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 8:
                    rows.append([int(v) for v in parts[1:]])
    except OSError:
        pass
    for name, a, b in HOPS:
        vals = sorted(max(0, r[b] - r[a]) / 1e3 for r in rows)
        print(f"hop {name} n {len(vals)} "
              f"p50_ms {fmt_ms(nearest_rank(vals, 0.50))} "
              f"p99_ms {fmt_ms(nearest_rank(vals, 0.99))} "
              f"max_ms {fmt_ms(vals[-1] if vals else None)}")


def delayed(due_path, starts_path, drain_s):
    due, starts = read_times(due_path), read_times(starts_path)
    limit = float(drain_s) * 1000
    late = []
    early = 0
    for seq, d in due.items():
        st = starts.get(seq)
        v = math.inf if st is None else st / 1e6 - d
        if v < 0:
            early += 1
        late.append(math.inf if v > limit else v)
    late.sort()
    started = sum(1 for v in late if v != math.inf)
    print(f"n {len(late)} started {started} "
          f"p50_ms {fmt_ms(nearest_rank(late, 0.50))} "
          f"p99_ms {fmt_ms(nearest_rank(late, 0.99))} "
          f"max_ms {fmt_ms(late[-1] if late else None)} "
          f"min_ms {fmt_ms(late[0] if late else None)} early {early}")


def burn(starts_path):
    ts = sorted(read_times(starts_path).values())
    if len(ts) < 2:
        print(f"n {len(ts)} elapsed_s - per_s -")
        return
    el = (ts[-1] - ts[0]) / 1e9
    print(f"n {len(ts)} elapsed_s {el:.3f} "
          f"per_s {(len(ts) - 1) / el if el > 0 else 0:.1f}")


# ── report ──────────────────────────────────────────────────────────────

def rows_of(rates):
    """(cell, metric, label, kind) in table order; kind: lat (lower is
    better), rate (higher is better), count, pct."""
    rows = []
    for r in rates:
        c = f"lat{r}"
        rows += [(c, "achieved", f"@{r}/s offered: achieved jobs/s", "rate"),
                 (c, "started_pct", f"@{r}/s started within drain %", "pct"),
                 (c, "p50", f"@{r}/s pickup p50 ms", "lat"),
                 (c, "p95", f"@{r}/s pickup p95 ms", "lat"),
                 (c, "p99", f"@{r}/s pickup p99 ms", "lat"),
                 (c, "max", f"@{r}/s pickup max ms", "lat"),
                 (c, "empty_woken", f"@{r}/s a2 empty claims after wake",
                  "count"),
                 (c, "visibility_waits", f"@{r}/s a2 visibility waits",
                  "count")]
    rows += [("burn", "per_s", "burn-down, jobs/s", "rate"),
             ("burn", "stmts_per_job", "burn-down statements/job", "lat"),
             ("burn_fifo", "per_s", "burn-down in 64 FIFOs, jobs/s", "rate"),
             ("burn_fifo", "stmts_per_job", "64 FIFOs: statements/job", "lat"),
             ("enq", "per_s", "enqueue 16 producers, jobs/s", "rate"),
             ("enq_node", "per_s", "enqueue 16 prod., all from Node pg",
              "rate"),
             ("idle", "stmts_s", "idle statements/s", "lat"),
             ("idle", "xacts_s", "idle transactions/s", "lat"),
             ("delayed", "started_pct", "delayed started %", "pct"),
             ("delayed", "p50", "delayed lateness p50 ms", "lat"),
             ("delayed", "p99", "delayed lateness p99 ms", "lat"),
             ("delayed", "max", "delayed lateness max ms", "lat"),
             ("delayed", "wake_p50", "delayed wake-up lateness p50 ms", "lat"),
             ("delayed", "wake_p99", "delayed wake-up lateness p99 ms", "lat"),
             ("delayed", "wake_max", "delayed wake-up lateness max ms", "lat")]
    return rows


def num(v):
    if v in ("inf", "+inf"):
        return math.inf
    try:
        return float(v)
    except ValueError:
        return None


def show(v, kind):
    if v is None:
        return "-"
    if v == math.inf:
        return "inf"
    if kind == "count":
        return f"{v:.0f}"
    if abs(v) >= 1000:
        return f"{v:.0f}"
    if abs(v) >= 100:
        return f"{v:.0f}" if kind != "lat" else f"{v:.1f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def ratio(v, base):
    if v is None or base is None:
        return None
    if v == math.inf and base == math.inf:
        return None
    if v == math.inf:
        return math.inf
    if base == math.inf or base == 0:
        return None
    return v / base


def report(raw_path, csv_path, svg_path):
    vals = {}
    rates = []
    passes = set()
    with open(raw_path) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 5:
                continue
            p, cell, system, metric, value = parts
            passes.add(p)
            v = num(value)
            if v is None:
                continue
            vals.setdefault((cell, system, metric), []).append(v)
            if cell.startswith("lat") and cell[3:].isdigit():
                r = int(cell[3:])
                if r not in rates:
                    rates.append(r)
    fresh = {cell for cell, _, _ in vals}
    kept = carry(csv_path, fresh, rates)
    carried = {cell for cell, _, _ in kept}
    rows = rows_of(rates)
    med = {}
    for key, vs in vals.items():
        med[key] = statistics.median(vs)
    for key, row in kept.items():
        med[key] = num(row[3])

    def cell_value(cell, metric, system):
        # The Node-client enqueue row: a2 from a2.js, the peers' own enqueue
        # (their drivers are Node already).
        if cell == "enq_node" and system != "a2":
            cell = "enq"
        return med.get((cell, system, metric))

    labels = [name for _, name in SYSTEMS]
    w0 = max(len(r[2]) for r in rows) + 1
    wc = 19
    out = [f"{'':<{w0}}" + "".join(f"{n:>{wc}}" for n in labels)]
    for cell, metric, label, kind in rows:
        if cell not in fresh and not (cell == "enq_node" and "enq" in fresh):
            continue
        base = cell_value(cell, metric, "a2")
        line = f"{label:<{w0}}"
        present = False
        for i, (sysname, _) in enumerate(SYSTEMS):
            v = cell_value(cell, metric, sysname)
            present |= v is not None
            text = show(v, kind)
            if i > 0 and v not in (None, math.inf) and kind in ("lat", "rate"):
                q = ratio(v, base)
                if q is not None:
                    text += f" ({'inf' if q == math.inf else f'{q:.2f}'}x)"
            line += f"{text:>{wc}}"
        if present:
            out.append(line)
    print("\n".join(out))
    if "delayed" in fresh:
        print(target_line(med))
    if carried:
        print(f"(the CSV and the SVG keep the rows of {', '.join(sorted(carried))} "
              f"from the previous {csv_path})")

    spread = [f"{'pass-to-pass spread, (max-min)/median':<{w0}}" +
              "".join(f"{n:>{wc}}" for n in labels)]
    for cell, metric, label, kind in rows:
        if cell in carried:
            continue
        line = f"{label:<{w0}}"
        present = False
        for sysname, _ in SYSTEMS:
            key = ("enq" if cell == "enq_node" and sysname != "a2" else cell,
                   sysname, metric)
            vs = vals.get(key)
            text = "-"
            if vs and len(vs) > 1 and kind in ("lat", "rate"):
                present = True
                m = statistics.median(vs)
                if math.inf in vs or m == 0:
                    text = "-"
                else:
                    text = f"{(max(vs) - min(vs)) / m * 100:.0f}%"
            line += f"{text:>{wc}}"
        if present:
            spread.append(line)
    print()
    print("\n".join(spread))

    with open(csv_path, "w", newline="") as f:
        wr = csv.writer(f)
        wr.writerow(["cell", "metric", "system", "median", "min", "max",
                     "passes", "ratio_to_a2", "values"])
        for cell, metric, label, kind in rows:
            base = cell_value(cell, metric, "a2")
            for sysname, _ in SYSTEMS:
                key = ("enq" if cell == "enq_node" and sysname != "a2"
                       else cell, sysname, metric)
                if (cell, sysname, metric) in kept:
                    wr.writerow(kept[(cell, sysname, metric)])
                    continue
                vs = vals.get(key)
                if not vs:
                    continue
                m = statistics.median(vs)
                q = ratio(m, base) if sysname != "a2" else None
                wr.writerow([cell, metric, sysname, fmt(m), fmt(min(vs)),
                             fmt(max(vs)), len(vs),
                             "" if q is None else fmt(q),
                             ";".join(fmt(v) for v in vs)])
    with open(svg_path, "w") as f:
        f.write(svg(rates, cell_value, len(passes)))


def carry(csv_path, fresh, rates):
    """The rows of csv_path (a previous report) of the cells this run did
    not measure, verbatim, by (cell, system, metric); their rates join
    rates."""
    kept = {}
    try:
        f = open(csv_path, newline="")
    except OSError:
        return kept
    with f:
        rd = csv.reader(f)
        if next(rd, None) is None:
            return kept
        for row in rd:
            if len(row) < 9 or num(row[3]) is None:
                continue
            cell, metric, system = row[0], row[1], row[2]
            if cell in fresh or (cell == "enq_node" and system != "a2" and
                                 "enq" in fresh):
                continue
            kept[(cell, system, metric)] = row
            if cell.startswith("lat") and cell[3:].isdigit():
                r = int(cell[3:])
                if r not in rates:
                    rates.append(r)
    rates.sort()
    return kept


def target_line(med):
    a2 = med.get(("delayed", "a2", "p99"))
    peers = [(med.get(("delayed", s, "p99")), name) for s, name in SYSTEMS[1:]]
    peers = [(v, name) for v, name in peers if v is not None]
    wake = med.get(("delayed", "a2", "wake_p99"))
    text = ("target: a2 p99 lateness (wake-up - due) <= 5 ms, and its "
            "handler-start lateness <= 0.1x the better peer's")
    if a2 is None:
        return text + ": a2 not measured"
    if wake is None:
        return text + ": a2's wake-ups not measured"
    text += f": a2 wake-up {fmt_ms(wake)} ms, handler start {fmt_ms(a2)} ms"
    ok = wake <= 5
    if peers:
        best, name = min(peers)
        q = ratio(a2, best)
        text += f", the better peer {name} {fmt_ms(best)} ms"
        if best == math.inf:
            text += " (a2 finite)" if a2 != math.inf else ""
            ok = ok and a2 != math.inf
        else:
            text += f", {'inf' if q == math.inf else f'{q:.3f}'}x"
            ok = ok and q is not None and q <= 0.1
    else:
        text += ", no peer measured (the ratio is not checked)"
    return text + (": met" if ok else ": NOT met")


def fmt(v):
    if v == math.inf:
        return "inf"
    return f"{v:.4g}" if abs(v) < 1e5 else f"{v:.0f}"


# ── SVG ─────────────────────────────────────────────────────────────────

COLORS = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f"]


def panel(out, x0, y0, w, h, title, groups, values, log, unit):
    """values[g][s]: number, inf or None. Draws one bar chart at x0, y0."""
    left, top, bottom = 60, 28, 36
    pw, ph = w - left - 10, h - top - bottom
    finite = [v for row in values for v in row
              if v is not None and v != math.inf and v > 0]
    if not finite:
        finite = [1.0]
    if log:
        lo = 10 ** math.floor(math.log10(min(finite)))
        hi = 10 ** math.ceil(math.log10(max(finite)))
        if hi <= lo:
            hi = lo * 10

        def y(v):
            v = min(max(v, lo), hi)
            return y0 + top + ph - ph * (math.log10(v) - math.log10(lo)) / (
                math.log10(hi) - math.log10(lo))
        ticks = []
        t = lo
        while t <= hi * 1.0001:
            ticks.append(t)
            t *= 10
    else:
        hi = max(finite) * 1.1
        step = 10 ** math.floor(math.log10(hi))
        if hi / step < 3:
            step /= 2

        def y(v):
            return y0 + top + ph - ph * min(v, hi) / hi
        ticks = [i * step for i in range(int(hi / step) + 1)]
    out.append(f'<text x="{x0 + w / 2}" y="{y0 + 16}" text-anchor="middle" '
               f'font-size="13">{escape(title)}</text>')
    out.append(f'<text x="{x0 + 12}" y="{y0 + top + ph / 2}" '
               f'transform="rotate(-90 {x0 + 12} {y0 + top + ph / 2})" '
               f'text-anchor="middle">{escape(unit)}</text>')
    for t in ticks:
        yy = y(t)
        out.append(f'<line x1="{x0 + left}" x2="{x0 + left + pw}" '
                   f'y1="{yy:.1f}" y2="{yy:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{x0 + left - 4}" y="{yy + 4:.1f}" '
                   f'text-anchor="end">{t:g}</text>')
    ng, ns = len(groups), len(SYSTEMS)
    gw = pw / max(ng, 1)
    bw = gw * 0.8 / ns
    for gi, g in enumerate(groups):
        gx = x0 + left + gi * gw + gw * 0.1
        for si in range(ns):
            v = values[gi][si]
            if v is None:
                continue
            top_y = y0 + top if v == math.inf else y(v)
            fill = COLORS[si]
            extra = ' fill-opacity="0.35"' if v == math.inf else ""
            label = "not all started" if v == math.inf else f"{v:g}"
            out.append(f'<rect x="{gx + si * bw:.1f}" y="{top_y:.1f}" '
                       f'width="{bw * 0.9:.1f}" '
                       f'height="{y0 + top + ph - top_y:.1f}" fill="{fill}"'
                       f'{extra}><title>{escape(SYSTEMS[si][1])} '
                       f'{escape(g)}: {label}</title></rect>')
        out.append(f'<text x="{x0 + left + gi * gw + gw / 2:.1f}" '
                   f'y="{y0 + top + ph + 16}" text-anchor="middle">'
                   f'{escape(g)}</text>')
    out.append(f'<line x1="{x0 + left}" x2="{x0 + left + pw}" '
               f'y1="{y0 + top + ph}" y2="{y0 + top + ph}" stroke="#333"/>')


def svg(rates, value, npasses):
    width, ph = 900, 300
    out = []
    y = 40

    def per_system(cell, metric):  # the metric of every system
        return [value(cell, metric, s) for s, _ in SYSTEMS]

    groups, rows = [], []
    for r in rates:
        for m in ("p50", "p99"):
            groups.append(f"{m} @{r}/s")
            rows.append(per_system(f"lat{r}", m))
    panel(out, 0, y, width, ph,
          "pickup latency, commit acknowledged -> handler start "
          "(lower is better; pale: some jobs never started)",
          groups, rows, True, "ms")
    y += ph
    for title, labels, cells, unit in (
            ("throughput (higher is better)",
             ["burn-down", "burn-down in 64 FIFOs", "enqueue 16 producers",
              "enqueue, all from Node pg"],
             [("burn", "per_s"), ("burn_fifo", "per_s"), ("enq", "per_s"),
              ("enq_node", "per_s")],
             "jobs/s"),
            ("database work (lower is better)",
             ["idle statements/s", "idle transactions/s",
              "burn-down statements/job"],
             [("idle", "stmts_s"), ("idle", "xacts_s"),
              ("burn", "stmts_per_job")],
             "per s / per job")):
        panel(out, 0, y, width, ph, title, labels,
              [per_system(c, m) for c, m in cells], False, unit)
        y += ph
    dg = ["p50", "p99", "max"]
    drows = [per_system("delayed", m) for m in dg]
    if any(v is not None for row in drows for v in row):
        panel(out, 0, y, width, ph,
              "delayed jobs: lateness, handler start - due time "
              "(lower is better; pale: some jobs never started)",
              [f"lateness {m}" for m in dg], drows, True, "ms")
        y += ph
    legend_y = y + 10
    for i, (_, name) in enumerate(SYSTEMS):
        x = 60 + i * 165
        out.append(f'<rect x="{x}" y="{legend_y}" width="12" height="12" '
                   f'fill="{COLORS[i]}"/>')
        out.append(f'<text x="{x + 16}" y="{legend_y + 10}">'
                   f'{escape(name)}</text>')
    height = legend_y + 30
    head = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" '
            f'height="{height}" font-family="sans-serif" font-size="11">',
            f'<rect width="{width}" height="{height}" fill="white"/>',
            f'<text x="{width / 2}" y="22" text-anchor="middle" '
            f'font-size="15">bench/peers: a2, Graphile Worker and pg-boss '
            f'(medians of {npasses} passes)</text>']
    return "\n".join(head + out + ["</svg>"]) + "\n"


if __name__ == "__main__":
    a = sys.argv[1:]
    if len(a) == 3 and a[0] == "latency":
        latency(a[1], a[2])
    elif len(a) == 4 and a[0] == "delayed":
        delayed(a[1], a[2], a[3])
    elif len(a) == 2 and a[0] == "hops":
        hops(a[1])
    elif len(a) == 2 and a[0] == "burn":
        burn(a[1])
    elif len(a) == 4 and a[0] == "report":
        report(a[1], a[2], a[3])
    else:
        sys.exit(__doc__)
