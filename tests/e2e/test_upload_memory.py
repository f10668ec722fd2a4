"""The upload endpoint as a hostile session uses it: 30 files of 7.9 MiB to ids no widget uses.

The third audit's probe grew a server from 403 to 639 MB, then 876 MB, and it stayed there. The
browser uploads one real file through the DDP lab's uploader, which gives the session's id and
the headers Streamlit checks; then the same browser context (its cookies, its XSRF token) PUTs
the probe's files to fresh ids, as a script on the group's network could. The server keeps
each session's newest files only (ui/upload_limits.py) and gives the memory back.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest

from tests.e2e.conftest import streamlit_server

pytestmark = pytest.mark.e2e

FILES, FILE_BYTES = 30, int(7.9 * 2**20)
SETTLE_MB = 50  # the bound: RSS back within 50 MB of where it started


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        kilobytes = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    return kilobytes / 1024


def test_uploads_to_ids_no_widget_uses_do_not_keep_the_servers_memory(browser, tmp_path):
    with streamlit_server() as (url, server):
        context = browser.new_context(viewport={"width": 1280, "height": 800})
        page = context.new_page()
        page.set_default_timeout(60_000)
        try:
            page.goto(f"{url}/DDP")
            page.get_by_text("Load a results file").first.wait_for()
            sent = []
            page.on("request", lambda r: sent.append(r) if "/_stcore/upload_file/" in r.url else None)
            small = tmp_path / "not-results.json"
            small.write_text(json.dumps({"format": "not a results file"}))
            page.locator("input[type=file]").first.set_input_files(str(small))
            deadline = time.monotonic() + 30
            while not sent and time.monotonic() < deadline:
                page.wait_for_timeout(100)
            assert sent, "the uploader made no request"
            upload = sent[0]
            base = upload.url.rsplit("/", 1)[0]
            headers = {k: v for k, v in upload.headers.items() if k.lower().startswith("x-xsrf")}
            page.wait_for_timeout(2000)
            before = rss_mb(server.pid)
            payload = b"\x00" * FILE_BYTES
            for _ in range(FILES):
                answer = context.request.put(
                    f"{base}/{uuid.uuid4()}",
                    headers=headers,
                    multipart={
                        "file": {"name": "probe.bin", "mimeType": "application/octet-stream", "buffer": payload}
                    },
                )
                assert answer.status == 204, answer.status  # accepted, as the probe's were
            deadline = time.monotonic() + 30
            while rss_mb(server.pid) > before + SETTLE_MB and time.monotonic() < deadline:
                time.sleep(0.5)
            after = rss_mb(server.pid)
            assert after <= before + SETTLE_MB, f"RSS {before:.0f} MB -> {after:.0f} MB after {FILES} uploads"
            page.reload()  # the session's page still works after the probe
            page.get_by_text("Load a results file").first.wait_for()
        finally:
            context.close()
