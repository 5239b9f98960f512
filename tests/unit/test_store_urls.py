"""Store URLs: every malformed or unsafe URL gets a clear error before any I/O."""

from __future__ import annotations

from pathlib import Path

import pytest

from contracts import InvalidStoreUrl, StoreMissing
from session_store import open_store

pytestmark = pytest.mark.sqlite


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("postgres://db/x", "supported: sqlite://, s3://, dynamodb://"),
        ("sqlite://", "names no file"),
        ("sqlite://host/file.db", "names no file"),
        ("sqlite:///tmp/x.db?mode=ro", "take no parameters"),
        ("s3://", "names no bucket"),
        ("s3://bucket/prefix?endpoint=http://x", "unknown parameter"),
        ("dynamodb://", "names no table"),
        ("dynamodb://table/extra", "name a table only"),
        ("s3://key:secret@bucket", "must not carry credentials"),
        ("s3://bucket?endpoint_url", "malformed query"),
    ],
)
async def test_malformed_urls_are_refused_clearly(url: str, fragment: str) -> None:
    with pytest.raises(InvalidStoreUrl) as raised:
        await open_store(url)
    assert fragment in raised.value.message
    assert "secret" not in raised.value.message, "credentials never reach an error message"


async def test_read_only_open_of_a_missing_file_says_so(tmp_path: Path) -> None:
    with pytest.raises(StoreMissing) as raised:
        await open_store(f"sqlite:///{tmp_path}/absent.db", read_only=True)
    assert "absent.db" in raised.value.message


async def test_sqlite_store_is_created_on_first_open(tmp_path: Path) -> None:
    store = await open_store(f"sqlite:///{tmp_path}/sub/dir/store.db")
    await store.close()
    assert (tmp_path / "sub" / "dir" / "store.db").exists()
