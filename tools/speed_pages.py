"""Render the speed pages in headless Chromium: no console error, every chart drawn, a screenshot kept.

    python3 tools/speed_pages.py PAGE.html [--screenshot OUT.png]

Prints a JSON line {ok, charts, bars, intervals, console_errors, screenshot}. Used by
tests/cli/test_speed_pages_in_chromium.py and to make docs/speed-page.png from a page of a real run.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def browser() -> str | None:
    return next((shutil.which(b) for b in BROWSERS if shutil.which(b)), None)


def run_browser(exe: str, page: Path, *extra: str, timeout: float = 90) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="dfp-chromium-") as profile:
        argv = [exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", *extra, page.resolve().as_uri()]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)


def check(page: Path, screenshot: Path | None) -> dict:
    exe = browser()
    if exe is None:
        return {"ok": False, "why": "no chromium on PATH"}
    dom = run_browser(exe, page, "--dump-dom")
    errors = [ln for ln in dom.stderr.splitlines() if re.search(r"CONSOLE|Uncaught|ERROR:.*console", ln)]
    svgs = re.findall(r"<svg\b.*?</svg>", dom.stdout, re.S)
    bars = sum(len(re.findall(r"<rect\b", s)) for s in svgs)
    intervals = sum(s.count('class="interval"') for s in svgs)
    drawn = bool(svgs) and all("<rect" in s or "<path" in s for s in svgs)
    out = {"ok": dom.returncode == 0 and drawn and not errors, "charts": len(svgs), "bars": bars,
           "intervals": intervals, "console_errors": errors, "screenshot": None}
    if screenshot is not None:
        shot = run_browser(exe, page, f"--screenshot={screenshot.resolve()}", "--window-size=1100,1600",
                           "--hide-scrollbars")
        out["screenshot"] = str(screenshot) if shot.returncode == 0 and screenshot.is_file() else None
        out["ok"] = out["ok"] and out["screenshot"] is not None
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("page", type=Path)
    ap.add_argument("--screenshot", type=Path, default=None)
    args = ap.parse_args(argv)
    result = check(args.page, args.screenshot)
    print(json.dumps(result))
    return 0 if result.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
