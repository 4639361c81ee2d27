"""Property: any set of `up`/`run` flags is accepted, or refused with our named-field error.

The same functions the CLI calls (parse_ttl, parse_pairs, spec_from_flags), fed what
hypothesis generates: superscript digits, 5,000-digit numbers, 10^15 minutes, newlines.
"""

from __future__ import annotations

import collections
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.cli.cluster import spec_from_flags
from gpufleet.cli.common import parse_pairs, parse_ttl
from gpufleet.components.errors import GpufleetError

EXAMPLES = int(os.environ.get("GPUFLEET_FUZZ_EXAMPLES", 5000))
COUNTS: collections.Counter = collections.Counter()

valid_name = st.from_regex(r"\A[a-z][a-z0-9]{0,8}\Z")
durations = st.one_of(
    st.from_regex(r"\A[1-9][0-9]{0,2}[mhd]\Z"),
    st.from_regex(r"\A[1-9][0-9]{0,2}[mhd]\Z"),
    st.text(max_size=12),
    st.from_regex(r"\A[0-9]{1,25}[smhd]?([0-9]{1,3}[smhd])?\Z"),
    st.sampled_from(["0m", "0s", "0d", "99999999999999999999d", "²", "4h", "1h30m", "9" * 5000]),
)
names = st.one_of(st.from_regex(r"\A[a-z][a-z0-9-]{0,33}\Z"), st.text(max_size=40), st.just("ok\n"))
nodes = st.one_of(st.integers(), st.integers(min_value=10**15), st.just(int("9" * 400)))
pairs = st.lists(st.text(max_size=15), max_size=3)
cidrs = st.lists(st.one_of(st.text(max_size=18), st.ip_addresses().map(str)), max_size=2)


@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))  # fmt: skip
@given(
    name=names,
    cloud=st.sampled_from(["local", "local", "local", "aws", "gcp", "azure", "ssh", "vm", ""]),
    n=nodes,
    instance_type=st.one_of(st.none(), st.none(), st.text(max_size=20),
                            st.sampled_from(["p4d.24xlarge", "a2-highgpu-8g", "local"])),
    ttl=durations,
    tags=pairs,
    ssh_cidr=cidrs,
    spot=st.booleans(),
)  # fmt: skip
def _flags(name, cloud, n, instance_type, ttl, tags, ssh_cidr, spot) -> None:
    try:
        spec_from_flags(
            name=name,
            cloud=cloud,
            nodes=n,
            instance_type=instance_type,
            spot=spot,
            ttl_minutes=parse_ttl(ttl),
            ssh_cidrs=ssh_cidr,
            tags=parse_pairs(tags, "tag"),
        )
        COUNTS["accepted"] += 1
    except GpufleetError as e:
        assert str(e) and e.exit_code
        COUNTS["refused"] += 1


@pytest.mark.timeout(1800)  # thousands of examples on a shared, slow CI machine
def test_every_flag_set_is_accepted_or_refused_with_our_error():
    COUNTS.clear()
    _flags()
    print(f"\nflag sets: {dict(COUNTS)} (other: 0, else this test fails)")
    assert sum(COUNTS.values()) >= EXAMPLES * 0.9


@pytest.mark.parametrize("text", ["0m", "0s", "0d", "0"])
def test_a_zero_ttl_is_zero_not_one_minute(text):
    assert parse_ttl(text) == 0


@pytest.mark.parametrize("text", ["²", "99999999999999999999d", "9" * 5000, "١٢"])
def test_absurd_ttls_are_refused_by_name(text):
    with pytest.raises(GpufleetError, match="ttl"):
        parse_ttl(text)


def test_a_name_with_a_trailing_newline_is_refused():
    with pytest.raises(GpufleetError, match="name"):
        spec_from_flags(name="ok\n", cloud="local", nodes=1)
