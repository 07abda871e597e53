"""The bed's node pieces that are pure functions."""

from __future__ import annotations

import pytest

from tfjob_testbed.nodes.realnode import bridge_mac


@pytest.mark.parametrize(
    ("address", "mac"),
    [
        ("10.244.0.1", "02:42:0a:f4:00:01"),  # node 1's bridge
        ("10.244.1.1", "02:42:0a:f4:01:01"),  # the second node's: another MAC
        ("255.0.16.9", "02:42:ff:00:10:09"),
    ],
)
def test_bridge_mac_is_locally_administered_and_names_the_address(address: str, mac: str) -> None:
    assert bridge_mac(address) == mac
    assert int(mac.split(":")[0], 16) & 0b11 == 0b10  # locally administered, unicast


@pytest.mark.parametrize("address", ["10.244.0", "10.244.0.256", "fe80::1", ""])
def test_bridge_mac_refuses_what_is_no_ipv4_address(address: str) -> None:
    with pytest.raises(ValueError):
        bridge_mac(address)
