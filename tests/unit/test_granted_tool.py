"""The egress credentials file the demo, ``bh up --example`` and ``bh chaos`` write."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from bh.granted_tool import destination, write_credentials


def test_the_credentials_file_is_only_the_owners_and_names_each_grant(tmp_path: Path) -> None:
    path = tmp_path / "credentials.json"
    path.write_text("{}")
    path.chmod(0o644)  # a file left readable by an earlier run is made the owner's only
    write_credentials(path, {"http://127.0.0.1:8025": "t0k3n", "https://mail.test:443/x": "u"})
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text()) == {
        "127.0.0.1:8025": {"Authorization": "Bearer t0k3n"},
        "mail.test:443": {"Authorization": "Bearer u"},
    }


def test_a_destination_is_the_host_and_port_of_the_url() -> None:
    assert destination("http://127.0.0.1:8025/v1") == "127.0.0.1:8025"
