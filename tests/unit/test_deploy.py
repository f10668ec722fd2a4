"""The class server's recipe: one nginx config for `make serve` and compose.yaml, and it is valid nginx."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from deploy import serve  # noqa: E402

NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)


def test_make_serve_and_compose_use_the_same_nginx_config():
    compose = (ROOT / "compose.yaml").read_text()
    assert "./deploy/nginx.conf:/etc/nginx/nginx.conf" in compose
    assert serve.CONFIG == ROOT / "deploy" / "nginx.conf"
    assert "explorer-upstream.conf" in compose and "explorer-server.conf" in compose
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "python:3.11-slim" in dockerfile and "USER explorer" in dockerfile and "/_stcore/health" in dockerfile


@pytest.mark.skipif(NGINX is None, reason="no nginx here")
@pytest.mark.parametrize("auth", [False, True])
def test_the_config_is_valid_nginx_with_the_files_make_serve_writes(tmp_path, auth):
    shutil.copyfile(serve.CONFIG, tmp_path / "nginx.conf")
    (tmp_path / "explorer-upstream.conf").write_text(serve.upstream_conf([8511, 8512], {8512}))
    htpasswd = tmp_path / "htpasswd"
    htpasswd.write_text("teacher:$apr1$abc$0123456789abcdefghijkl\n")
    (tmp_path / "explorer-server.conf").write_text(serve.server_conf(8599, htpasswd if auth else None))
    checked = subprocess.run(
        [NGINX, "-t", "-p", str(tmp_path), "-c", str(tmp_path / "nginx.conf")], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stderr
    assert "hash $explorer_client consistent" in (tmp_path / "explorer-upstream.conf").read_text()


def test_each_replica_gets_a_fair_share_of_the_cores():
    assert serve.workers_per_replica(1) >= 1 and serve.workers_per_replica(64) == 1
