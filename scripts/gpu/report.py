#!/usr/bin/env python3
"""The GPU check's report (scripts/gpu/check.sh calls it last): reads every step's status, seconds and
output from WORK/steps and the JSON files the steps wrote, and writes OUT/figures.json (all of it,
machine-readable) and OUT/summary.md (the same for a person: the machine, one line per step, then
each step's tables and rows). Prints the summary.
    report.py --mode cuda --work /tmp/vaebox-check --out $OUT --seconds 431
"""
import argparse
import json
import os
import re

STEPS = [
    "environment", "weights", "vae_wan21_bf16", "restore_3b", "flashvsr", "jobs", "parity", "calibrate",
    "oom_backoff", "budget", "vae_seedvr2", "vae_wan21_f32_tf32", "restore_7b", "vae_wan22_bf16",
]
# Files a step leaves beside its log, read as JSON when present.
STEP_JSON = {"parity": "parity.json", "jobs": ["remote_decode.json"], "oom_backoff": "oom.json"}


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def read_json(path):
    text = read(path)
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return {"unparsed": text[-2000:]}


def tables(log):
    """Markdown table lines and the one-line JSON summaries a bench prints."""
    lines = log.splitlines()
    table = [l for l in lines if l.startswith("|")]
    objects = []
    for l in lines:
        if l.startswith("{") and l.endswith("}"):
            try:
                objects.append(json.loads(l))
            except ValueError:
                pass
    return table, objects


def step_record(work, name):
    base = os.path.join(work, "steps", name)
    status = (read(base + ".status") or "not run").strip()
    seconds = read(base + ".seconds")
    log = read(base + ".log") or ""
    record = {"status": status, "seconds": int(seconds) if seconds else None}
    table, objects = tables(log)
    if table:
        record["table"] = table
    if objects:
        record["json"] = objects
    files = STEP_JSON.get(name, [])
    for file in [files] if isinstance(files, str) else files:
        value = read_json(os.path.join(work, file))
        if value is not None:
            record[file.removesuffix(".json")] = value
    if name == "calibrate":
        record["rows"] = sorted(set(re.findall(r"CalibratedRow \{.*\}", log)))
    if name == "environment":
        record["lines"] = [l for l in log.splitlines() if l.strip()][:40]
    if status.startswith("failed"):
        record["log_tail"] = log.splitlines()[-30:]
    return record


def jobs_tables(objects):
    """The jobs as a user sends them, then each job beside its bare model (jobs.py's JSON lines)."""
    # remote_decode_smoke.py's own object names its job too (by id, with "ok"): it is shown below the tables.
    jobs = [o for o in objects if "job" in o and "ok" not in o]
    pairs = [o for o in objects if "job_vs_bare" in o]
    cell = lambda v, f="{:.3f}": "" if v is None else f.format(v)
    out = ["| job | frames | load s | read s | compute s | write s | total s | compute frames/s | wall s | error |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    out += [f"| {j['job']} | {j.get('frames', '')} | {cell(j.get('load_model'))} | {cell(j.get('read'))} | {cell(j.get('compute'))} | {cell(j.get('write'))} "
            f"| {cell(j.get('total'))} | {cell(j.get('compute_fps'), '{:.1f}')} | {cell(j.get('wall_s'))} | {j.get('error', '')} |" for j in jobs]
    out += ["", "| job | against | job compute s/frame | bare s/frame | job / bare |", "|---|---|---:|---:|---:|"]
    out += [f"| {p['job_vs_bare']} | {p['what']} | {cell(p.get('job_s_per_frame'), '{:.5f}')} | {cell(p.get('bare_s_per_frame'), '{:.5f}')} "
            f"| {cell(p.get('ratio'), '{:.2f}') or 'missing: ' + p.get('missing', '')} |" for p in pairs]
    return out


def summary(mode, seconds, steps):
    out = [f"# vaebox GPU check ({mode}), {seconds} s", ""]
    env = steps["environment"].get("lines", [])
    out += ["## Machine", "", "```"] + [l for l in env if any(k in l for k in ("NVIDIA", "torch", "diffusers", "vaebox", "Driver", "MiB"))][:12] + ["```", ""]
    out += ["## Steps", "", "| step | status | seconds |", "|---|---|---:|"]
    out += [f"| {name} | {s['status']} | {s['seconds'] if s['seconds'] is not None else ''} |" for name, s in steps.items()]
    for name, s in steps.items():
        body = []
        if name == "parity" and isinstance(s.get("parity"), dict):
            body += ["| check | relative error | bound | passed |", "|---|---:|---:|---|"]
            body += [f"| {c['check']} | {c['relative_error']:.2e} | {c['bound']:.2e} | {c['passed']} |" for c in s["parity"].get("checks", [])]
        if s.get("table"):
            body += s["table"]
        if s.get("rows"):
            body += ["```"] + s["rows"] + ["```"]
        if name == "jobs":
            body += jobs_tables(s.get("json", []))
            decode = s.get("remote_decode")
            if decode:
                body += ["", "diffusers' remote_decode against /v1/decode:", "```", json.dumps(decode, indent=1)[:3000], "```"]
        if name == "oom_backoff" and isinstance(s.get("oom"), dict):
            body += ["```", json.dumps(s["oom"].get("plan", s["oom"]), indent=1)[:3000], "```"]
        if s.get("log_tail"):
            body += ["```"] + s["log_tail"] + ["```"]
        if body:
            out += ["", f"## {name}", ""] + body
    return "\n".join(out) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--seconds", type=int, required=True)
    args = p.parse_args()
    steps = {name: step_record(args.work, name) for name in STEPS}
    figures = {"mode": args.mode, "seconds": args.seconds, "steps": steps}
    with open(os.path.join(args.out, "figures.json"), "w") as f:
        json.dump(figures, f, indent=1)
    text = summary(args.mode, args.seconds, steps)
    with open(os.path.join(args.out, "summary.md"), "w") as f:
        f.write(text)
    print(text)
    failed = [name for name, s in steps.items() if s["status"].startswith("failed")]
    if failed:
        print("failed steps: " + ", ".join(failed))
    raise SystemExit(1 if failed else 0)


if __name__ == "__main__":
    main()
