"""How long `shap-e app` takes to answer a text request, the first and the later ones (gradio_client).

    python -m bench.app_latency [--requests 3] [--threads 2] [--prompt "a red cube"] [--grid-size 128]

Starts `shap-e app` with the bundled models on a free port (`OMP_NUM_THREADS=--threads`), waits for
the page, then sends the requests one after another from one client, each with a new seed and the
page's default settings. Per request it prints the wall time from submitting to having every file on
the client (GLB, PLY, OBJ, latent, meta.json, turntable), the job's time in the server's log
(sampling to the last file written), the server process's CPU seconds meanwhile (with one thread,
the wall time on a core of its own), and the job's stage times from its meta.json. The first
request also loads the models; the later ones are what a visitor waits for. Writes
`bench/results/app_latency_<time>.json`.
"""
import argparse
import json
import os
import platform
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from shap_e.util.machine import cpu_model_and_flags

RESULTS = Path(__file__).resolve().parent / "results"


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_app(threads: int, log: Path):
    """`shap-e app` on a free port; returns (process, url, seconds until the page answered)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "HF_HUB_OFFLINE": "1"}
    t0 = time.perf_counter()
    with log.open("w") as out:
        process = subprocess.Popen([sys.executable, "-m", "shap_e", "app", "--port", str(port), "--device", "cpu"],
                                   env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    while process.poll() is None:
        try:
            urllib.request.urlopen(url, timeout=2).close()
            return process, url, time.perf_counter() - t0
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"shap-e app exited with {process.returncode}:\n{log.read_text()[-2000:]}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2, help="torch threads of the app (OMP_NUM_THREADS)")
    parser.add_argument("--prompt", default="a red cube")
    parser.add_argument("--grid-size", type=int, default=128)
    parser.add_argument("--preset", default="default", choices=("default", "fast"))
    args = parser.parse_args(argv)
    from gradio_client import Client

    log = Path(tempfile.mkdtemp(prefix="app_latency_")) / "server.log"
    load_start = os.getloadavg()
    process, url, startup = start_app(args.threads, log)
    rows = []
    try:
        client = Client(url, verbose=False)
        for i in range(args.requests):
            t0, cpu0 = time.perf_counter(), cpu_seconds(process.pid)
            _, glb, _, files = client.predict(args.prompt, "text-small", i, False, 3.0, args.preset, 1, args.grid_size,
                                              api_name="/text_to_3d")
            wall, cpu = time.perf_counter() - t0, cpu_seconds(process.pid) - cpu0
            meta = json.loads(Path(next(f for f in files if f.endswith("meta.json"))).read_text())
            job = re.findall(r"job \d+ \(text-small\) ended after ([\d.]+) s", log.read_text())[-1]
            rows.append({"request": i + 1, "wall_s": round(wall, 2), "job_s": float(job),
                         "server_cpu_s": round(cpu, 2),
                         "glb_bytes": Path(glb).stat().st_size,
                         **{f"{k}_s": v for k, v in meta["seconds"].items()}})
    finally:
        process.terminate()
        process.wait(timeout=60)
    report = {"cpu": cpu_model_and_flags()[0], "logical_cpus": os.cpu_count(), "threads": args.threads,
              "python": platform.python_version(), "load_average_start": load_start,
              "load_average_end": os.getloadavg(), "startup_s": round(startup, 2), "settings": vars(args),
              "requests": rows}
    print(f"{report['cpu']}, {args.threads} torch thread(s), load average {load_start[0]:.2f} -> "
          f"{report['load_average_end'][0]:.2f}; page up after {startup:.1f} s")
    print("| request | wall s | job s | server CPU s | sampling s | mesh s | turntable s | GLB bytes |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['request']} | {r['wall_s']} | {r['job_s']} | {r['server_cpu_s']} | {r.get('sampling_s')} | "
              f"{r.get('mesh_s')} | {r.get('turntable_s')} | {r['glb_bytes']} |")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"app_latency_{time.strftime('%Y%m%d_%H%M%S')}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
