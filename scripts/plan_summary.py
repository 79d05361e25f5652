#!/usr/bin/env python3
"""Summarises experiments/check_plan.sh's gpipe_plan JSON files into summary.md and summary.json.

For each scenario (model and budget): the relative error of predicted step time and peak bytes
per device against measurement for the verified plans and the grid, and the planner's first
choice (measured) against the fastest grid shape whose measured peak fit the budget.
Usage: scripts/plan_summary.py RESULTS_DIR
"""
import glob
import json
import os
import statistics
import sys


def shape(p):
    return "K={K} R={R} M={M} {schedule} v={v} {checkpoint} t={threads}".format(**p)


def errors(p):
    measured_peak = max(p["measured_peak_bytes_per_device"])
    predicted_peak = max(p["predicted_peak_bytes_per_device"])
    return (p["predicted_step_ms"] / p["measured_step_ms"] - 1, predicted_peak / measured_peak - 1,
            measured_peak)


def paired_error(p):
    """Median over rounds of that round's prediction (from a calibration measured right before
    it) over its measured median, less 1; None without --verify-paired."""
    pairs = [a / b - 1 for a, b in zip(p.get("paired_predicted_round_ms", []),
                                       p.get("measured_round_ms", []))]
    return statistics.median(pairs) if pairs else None


FUSED = {"gpipe", "1f1b", "interleaved-1f1b", "looped-bfs"}
SPLIT = {"zb-h1", "zb-h2"}
V = {"zbv", "dualpipev", "v-half"}


def family(p):
    """The schedule family a plan is calibrated by (costs/calibration.h): one device is fused."""
    if p["K"] == 1 or p["schedule"] in FUSED:
        return "fused"
    if p["schedule"] in SPLIT:
        return "split"
    if p["schedule"] in V:
        return "v"
    return "custom"


def family_rows(rows):
    """Per schedule family over every scenario: the paired and planning-time errors (median,
    range) of its measured plans, each plan counted once per scenario."""
    out = []
    for name in ("fused", "split", "v"):
        runs = [m for r in rows for m in r["runs"] if m["family"] == name]
        paired = [m["paired_time_error"] for m in runs if m["paired_time_error"] is not None]
        timed = [m["time_error"] for m in runs]
        if not runs:
            continue
        out.append({"family": name, "plans": len(runs),
                    "paired_median": statistics.median(paired) if paired else None,
                    "paired_min": min(paired) if paired else None,
                    "paired_max": max(paired) if paired else None,
                    "paired_abs_median": statistics.median(abs(x) for x in paired)
                    if paired else None,
                    "time_median": statistics.median(timed), "time_min": min(timed),
                    "time_max": max(timed)})
    return out


def spread(rounds):
    """How far the slowest round's median was above the fastest's (0 with one round)."""
    return max(rounds) / min(rounds) - 1 if rounds else 0.0


def within_15(m, time_error="time_error"):
    """Step time (`time_error`: as predicted at planning time, or paired) and peak bytes both
    predicted within 15% of the measurement."""
    return (m[time_error] is not None and abs(m[time_error]) <= 0.15
            and abs(m["peak_error"]) <= 0.15)


def pct(value, spec):
    return "-" if value is None else format(value, spec)


def main(folder):
    rows = []
    for path in sorted(glob.glob(os.path.join(folder, "*.json"))):
        if os.path.basename(path) == "summary.json":
            continue
        with open(path) as f:
            run = json.load(f)
        budget = run["memory_per_device"]
        measured = []
        for kind in ("plans", "grid"):
            for p in run[kind]:
                if "measured_step_ms" not in p:
                    continue
                time_err, peak_err, peak = errors(p)
                measured.append({"kind": kind, "shape": shape(p), "family": family(p),
                                 "time_error": time_err,
                                 "peak_error": peak_err, "measured_step_ms": p["measured_step_ms"],
                                 "predicted_step_ms": p["predicted_step_ms"],
                                 "round_ms": p.get("measured_round_ms", []),
                                 "round_spread": spread(p.get("measured_round_ms", [])),
                                 "paired_time_error": paired_error(p),
                                 "calibration_rounds": len(p.get("calibration_rounds", [])),
                                 "calibration_spread": spread(p.get("calibration_rounds", [])),
                                 "fits_measured": peak <= budget})
        first = run["plans"][0]
        fitting_grid = [m for m in measured if m["kind"] == "grid" and m["fits_measured"]]
        best = min(fitting_grid, key=lambda m: m["measured_step_ms"]) if fitting_grid else None
        rows.append({
            "scenario": os.path.splitext(os.path.basename(path))[0],
            "budget_bytes": budget,
            "planning_seconds": run["planning_seconds"],
            "considered": run["considered"], "fit": run["fit"],
            "first_choice": shape(first),
            "first_predicted_ms": first["predicted_step_ms"],
            "first_measured_ms": first.get("measured_step_ms"),
            "best_grid": best["shape"] if best else None,
            "best_grid_measured_ms": best["measured_step_ms"] if best else None,
            "grid_fitting": len(fitting_grid),
            "best_grid_speedup_over_first":
                first["measured_step_ms"] / best["measured_step_ms"] - 1 if best else None,
            "max_abs_time_error": max(abs(m["time_error"]) for m in measured),
            "max_abs_peak_error": max(abs(m["peak_error"]) for m in measured),
            "max_round_spread": max(m["round_spread"] for m in measured),
            "within_15_percent": sum(within_15(m) for m in measured),
            "verified_within_15_percent": sum(within_15(m) for m in measured
                                              if m["kind"] == "plans"),
            "verified_plans": sum(m["kind"] == "plans" for m in measured),
            "paired_within_15_percent": sum(within_15(m, "paired_time_error")
                                            for m in measured),
            "max_abs_paired_time_error": max((abs(m["paired_time_error"]) for m in measured
                                              if m["paired_time_error"] is not None),
                                             default=None),
            "measured_plans": len(measured),
            "runs": measured})
    families = family_rows(rows)
    with open(os.path.join(folder, "summary.json"), "w") as f:
        json.dump({"command": "experiments/check_plan.sh", "scenarios": rows,
                   "families": families}, f, indent=2)
    lines = ["# gpipe_plan against measurement", "",
             "Made by `experiments/check_plan.sh` (this folder's COMMAND). Errors are predicted / "
             "measured - 1 over every measured plan of the scenario (the top 3 and the 13 grid "
             "shapes; R > 1 ran as R processes); `grid faster` is how much faster the fastest "
             "grid shape that fit the budget (measured peak) ran than the planner's first "
             "choice (negative: the planner's choice was faster). Every plan was measured in "
             "rounds (all plans in turn, round after round) and its measured ms is the median "
             "step of all rounds; `rounds ms` are each round's medians and `round spread` the "
             "slowest round over the fastest, less 1: what the machine's drift alone moved one "
             "plan's measurement by. `calibrations` "
             "are how many times the plan's calibration step (its prediction's scale) was "
             "measured and their spread, the same ratio. `paired err` (with "
             "`--verify-paired`): each round the plan's calibration was measured again right "
             "before its steps and the plan predicted from it; the median over rounds of that "
             "prediction over the round's measured median, less 1, which the machine's drift "
             "between planning and measuring does not move. `verified` counts the planner's "
             "verified plans (its top 3, `--verify 3`) whose step time and peak predicted at "
             "planning time were both within 15% of the measurement, `all` the same over every "
             "measured plan (the grid too), `paired` every measured plan with its paired error "
             "in place of the time error.", "",
             "| scenario | planning s | first choice | predicted ms | measured ms | fastest grid "
             "shape that fit | its ms | grid faster | max time err | max peak err | verified "
             "| all | paired | max paired err | max round spread |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append("| {scenario} | {planning_seconds:.1f} | {first_choice} | "
                     "{first_predicted_ms:.1f} | {first_measured_ms:.1f} | {best_grid} | "
                     "{best_grid_measured_ms:.1f} | {best_grid_speedup_over_first:+.1%} | "
                     "{max_abs_time_error:.1%} | {max_abs_peak_error:.1%} | "
                     "{verified_within_15_percent}/{verified_plans} | "
                     "{within_15_percent}/{measured_plans} | {paired_within_15_percent}/"
                     "{measured_plans} | {paired} | {max_round_spread:.1%} |".format(
                         paired=pct(r["max_abs_paired_time_error"], ".1%"), **r))
    lines += ["", "Per schedule family (costs/calibration.h: fused = gpipe, 1f1b, interleaved-1f1b, "
              "looped-bfs and every K=1 plan; split = zb-h1, zb-h2; v = zbv, dualpipev, v-half), "
              "over every measured plan of every scenario: the paired error and the error at "
              "planning time, median and range.", "",
              "| family | plans | paired err median | paired range | median abs paired err "
              "| time err median | time range |",
              "|---|---|---|---|---|---|---|"]
    for f in families:
        lines.append("| {} | {} | {} | {} .. {} | {} | {:+.1%} | {:+.1%} .. {:+.1%} |".format(
            f["family"], f["plans"], pct(f["paired_median"], "+.1%"),
            pct(f["paired_min"], "+.1%"), pct(f["paired_max"], "+.1%"),
            pct(f["paired_abs_median"], ".1%"), f["time_median"], f["time_min"],
            f["time_max"]))
    lines += ["", "Every measured plan:", "",
              "| scenario | source | shape | predicted ms | measured ms | time err | peak err "
              "| paired err | rounds ms | round spread | calibrations |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        for m in r["runs"]:
            lines.append("| {} | {} | {} | {:.1f} | {:.1f} | {:+.1%} | {:+.1%} | {} | {} | {:.1%} "
                         "| {}, {:.1%} |"
                         .format(r["scenario"], m["kind"], m["shape"], m["predicted_step_ms"],
                                 m["measured_step_ms"], m["time_error"], m["peak_error"],
                                 pct(m["paired_time_error"], "+.1%"),
                                 " / ".join("{:.1f}".format(x) for x in m["round_ms"]),
                                 m["round_spread"], m["calibration_rounds"],
                                 m["calibration_spread"]))
    with open(os.path.join(folder, "summary.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1])
