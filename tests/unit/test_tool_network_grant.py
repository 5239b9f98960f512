"""The operator, not the image, grants network destinations (issue 31, finding 4): an
image's ``network`` label is read — a malformed one is refused, a well-formed one is
reported as declared — but only the operator's ``allow`` becomes the definition's
network policy."""

from __future__ import annotations

import pytest

from contracts import InvalidInput
from contracts.tool import NetworkPolicy
from hands.labels import declared_network, definition_from_labels

P = "io.brainhands.tool."
BASE = {
    P + "name": "mailer",
    P + "version": "1",
    P + "schema": '{"type":"object"}',
    P + "replay": "unsafe",
    P + "timeout": "10",
}
MAIL = {**BASE, P + "network": "mail.internal:8025"}


def test_a_network_label_without_allow_grants_no_network() -> None:
    definition = definition_from_labels("img", "sha256:0", MAIL)
    assert definition.network == NetworkPolicy()
    assert definition.network.is_none


def test_with_allow_the_grant_is_exactly_the_allow() -> None:
    definition = definition_from_labels("img", "sha256:0", MAIL, allow=["ledger.internal:8030"])
    assert definition.network.allow == ("ledger.internal:8030",)
    same = definition_from_labels("img", "sha256:0", MAIL, allow=["mail.internal:8025"])
    assert same.network.allow == ("mail.internal:8025",)


@pytest.mark.parametrize(
    ("label", "declared"),
    [
        (None, ()),
        ("none", ()),
        ("mail.internal:8025", ("mail.internal:8025",)),
        ("a.internal:80, b.internal:443", ("a.internal:80", "b.internal:443")),
    ],
)
def test_what_the_image_declares_is_read_for_showing(
    label: str | None, declared: tuple[str, ...]
) -> None:
    labels = BASE if label is None else {**BASE, P + "network": label}
    assert declared_network(labels).allow == declared
    assert definition_from_labels("img", "sha256:0", labels).network.is_none


@pytest.mark.parametrize(
    ("label", "bad"),
    [("mail.internal", "mail.internal"), ("*:80", "*:80"), ("a.internal:80,no-port", "no-port")],
)
def test_a_malformed_network_label_is_still_refused_naming_the_bad_part(
    label: str, bad: str
) -> None:
    labels = {**BASE, P + "network": label}
    with pytest.raises(InvalidInput) as refused:
        definition_from_labels("img", "sha256:0", labels, allow=["mail.internal:8025"])
    assert refused.value.details["label"] == P + "network"
    assert f"{bad!r} is not host:port" in refused.value.message
    with pytest.raises(InvalidInput):
        declared_network(labels)
