"""Turn the stage results into the JSON document and the Markdown table, written atomically."""
import json
from pathlib import Path
from typing import Any, Dict, List, Optional

from shap_e.util.atomic import write_atomic


PEAK_KEY = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


def add_efficiency(results: List[Dict[str, Any]]) -> None:
    """Add seconds per model evaluation and per sample (samplers), achieved GFLOP/s and the fraction of the matmul
    peak of the same dtype and thread count (transformer rows): the peak measured inside the stage's
    process right after its runs, else the `matmul_peak` stage's."""
    peaks = {
        r["threads"]: r["metrics"]["peak_gflops"]
        for r in results if r["stage"] == "matmul_peak" and r.get("status") == "ok"
    }
    for r in results:
        evals = (r.get("metrics") or {}).get("model_evals")
        if r.get("status") == "ok" and evals:
            r["s_per_eval"] = r["median_s"] / evals
            r["s_per_sample"] = r["median_s"] / (r.get("info") or {}).get("samples", 1)
        flops = (r.get("info") or {}).get("flops") or r.get("counted_flops")
        if r.get("status") != "ok" or not flops:
            continue
        r["gflops"] = flops / r["median_s"] / 1e9
        peak = (r.get("metrics") or {}).get("local_peak_gflops")
        if not peak:
            dtype = r["info"].get("dtype")
            peak = peaks.get(r["threads"], {}).get(PEAK_KEY.get(dtype, "fp32"))
        r["fraction_of_peak"] = r["gflops"] / peak if peak else None


def _fmt(value: Optional[float], digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _notes(r: Dict[str, Any]) -> str:
    if r.get("status") != "ok":
        return f"**{r.get('status')}**: {r.get('reason', '')}".replace("|", "/")
    parts = [f"{k}={v}" for k, v in (r.get("info") or {}).items() if k not in ("flops", "dtype")]
    for key, value in (r.get("metrics") or {}).items():
        if key == "phases":
            parts.append("phases (wall s, CPU s, peak RSS MB): " + "; ".join(
                f"{p['phase']} {p['wall_s']:.1f} / {p['cpu_s']:.1f} / {p['peak_rss_mb']:.0f}" for p in value))
        elif isinstance(value, dict):
            parts += [f"{key}.{k}={v:.1f}" for k, v in value.items()]
        elif isinstance(value, float):
            parts.append(f"{key}={value:.3g}")
        else:
            parts.append(f"{key}={value}")
    if r.get("counted_flops"):
        top = ", ".join(f"{name} {f / 1e9:.0f}" for name, f in r["counted_flops_top"].items())
        parts.append(f"GFLOP counted by torch (no fused attention) {r['counted_flops'] / 1e9:.0f}: {top}")
    if r.get("s_per_eval"):
        parts.append(f"s/eval={r['s_per_eval']:.2f}")
    if r.get("s_per_sample") and (r.get("info") or {}).get("samples", 1) > 1:
        parts.append(f"s/sample={r['s_per_sample']:.3f}")
    return ", ".join(parts).replace("|", "/")


def markdown(doc: Dict[str, Any]) -> str:
    """The results as a Markdown document: a header of machine facts, then one row per stage."""
    s = doc["system"]
    lines = [
        f"# Shap-E benchmark {doc['timestamp']}",
        "",
        f"torch {s['torch']}, device {s['device']}{', ' + s['gpu'] if s.get('gpu') else ''}, "
        f"CPU {s['cpu_model']} ({s['logical_cpus']} logical), avx512_bf16={s['avx512_bf16']}, "
        f"amx_bf16={s['amx_bf16']}, mkldnn bf16={s['mkldnn_bf16_supported']}; "
        f"load average at start {s.get('loadavg')}, at end {doc.get('loadavg_end')}. "
        f"Mode: {doc['mode']}. Random seeded weights.",
        "",
        "Times are the median (and min) of n timed runs after w warm-up runs; CPU s is the median "
        "CPU time of the stage process (with 1 thread, wall/CPU > 1 means another process took the "
        "core). Peak RSS is the `VmHWM` "
        "of a fresh process per stage: *run* = peak during the timed runs only (mark reset after "
        "setup), *stage* = whole process incl. torch import and model build. GFLOP/s uses the "
        "analytic count in `bench/flops.py` (else torch's FLOP counter); % peak compares with the "
        "matmul peak of the same dtype and threads (2048³ on a CPU, 8192³ on a GPU), measured in the "
        "stage's process right after its runs.",
        "",
        "| stage | threads | dtype | n/w | median s | min s | CPU s | run peak RSS MB | stage peak RSS MB "
        "| CUDA peak MB | GFLOP/s | % peak | notes |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in doc["results"]:
        info = r.get("info") or {}
        ok = r.get("status") == "ok"
        frac = r.get("fraction_of_peak")
        lines.append(" | ".join([
            f"| {r['stage']}", str(r["threads"]), info.get("dtype", "–"),
            f"{len(r['runs_s'])}/{r['warmup']}" if ok else "–",
            _fmt(r.get("median_s")), _fmt(r.get("min_s")), _fmt(r.get("cpu_median_s")),
            _fmt(r.get("run_peak_rss_mb"), 0),
            _fmt(r.get("stage_peak_rss_mb"), 0),
            _fmt(r.get("cuda_peak_mb"), 0), _fmt(r.get("gflops"), 1),
            _fmt(None if frac is None else 100 * frac, 0), _notes(r),
        ]) + " |")
    return "\n".join(lines) + "\n" + _peer_section(doc.get("peer"))


def _peer_section(peer: Optional[Dict[str, Any]]) -> str:
    """The peer comparison's table (`--peer diffusers`), or why it failed; nothing without one."""
    if not peer:
        return ""
    if peer.get("status") == "error":
        return f"\n## Peer: diffusers\n\n**error**: {peer.get('reason')}\n"
    from bench.peer_diffusers import markdown as peer_markdown

    return "\n## Peer: diffusers\n\n" + peer_markdown(peer)


def write_report(doc: Dict[str, Any], out_dir: Path) -> Dict[str, Path]:
    """Write `<out_dir>/<timestamp>.json` and `.md`; return both paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": out_dir / f"{doc['timestamp']}.json", "md": out_dir / f"{doc['timestamp']}.md"}
    write_atomic(paths["json"], json.dumps(doc, indent=2))
    write_atomic(paths["md"], markdown(doc))
    return paths


def main(argv: Optional[List[str]] = None) -> None:
    """`python -m bench.report results/X.json`: recompute the derived figures, rewrite X.md, print it."""
    import sys

    paths = [Path(p) for p in (sys.argv[1:] if argv is None else argv)]
    if not paths:
        raise SystemExit("usage: python -m bench.report RESULT.json [...]")
    for path in paths:
        doc = json.loads(path.read_text())
        add_efficiency(doc["results"])
        write_report(doc, path.parent)
        print(markdown(doc))


if __name__ == "__main__":
    main()
