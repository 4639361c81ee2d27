"""Property: any stack file is accepted, or refused with our named-field error; never a crash.

Hypothesis generates stack configs (structured, then as YAML text, some of it mangled:
tabs, unclosed brackets, several documents, NUL bytes, python tags, absurd numbers).
"""

from __future__ import annotations

import collections
import os

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.components.clusterspec import ClusterSpec
from gpufleet.components.errors import GpufleetError
from gpufleet.components.stackconfig import parse_stack_yaml, spec_from_config

EXAMPLES = int(os.environ.get("GPUFLEET_FUZZ_EXAMPLES", 5000))
FIELDS = list(ClusterSpec.model_fields)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=10**14, max_value=10**16),
    st.just(int("9" * 60)),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(["local", "aws", "gcp", "azure", "ssh", "p4d.24xlarge", "a2-highgpu-8g",
                     "Standard_ND96asr_v4", "²", "1e400", "9" * 5000, "4h", "", "\x00", "-1",
                     "0", "10.0.0.0/8", "node\n"]),
)  # fmt: skip
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)
cluster = st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=10), values, max_size=8)
plausible = st.fixed_dictionaries(
    {"cloud": st.sampled_from(["local", "aws", "gcp", "azure"]),
     "nodes": st.integers(0, 600) | scalars,
     "instance_type": st.sampled_from(["p4d.24xlarge", "p5.48xlarge", "a2-highgpu-8g",
                                       "Standard_ND96asr_v4"]) | scalars},
    optional={"ttl_minutes": st.integers(-5, 10**7) | scalars, "spot": st.booleans() | scalars,
              "region": st.text(max_size=12) | scalars, "zone": scalars,
              "ssh_cidrs": st.lists(st.ip_addresses().map(str) | st.text(max_size=12), max_size=2),
              "tags": st.dictionaries(st.text(max_size=6), st.text(max_size=6) | scalars)},
)  # fmt: skip
config = st.one_of(
    st.fixed_dictionaries({"gpufleet:cluster": plausible}),
    st.fixed_dictionaries({"gpufleet:cluster": plausible}),
    st.fixed_dictionaries({"gpufleet:cluster": cluster}),
    st.dictionaries(st.sampled_from(["gpufleet:cluster", "aws:region", "x"]), values, max_size=3),
    values,
)
MANGLE = ["\t", "[", "{", "\n---\n", "\x00", "!!python/object:os.system ", ": :", "\n  - ",
          "&a ", "*a", "'", '"', "%YAML 9.9\n", "\ufeff", "? "]  # fmt: skip


def _yaml_text(doc: object, mangle: list[tuple[int, str]]) -> str:
    try:
        text = yaml.safe_dump({"config": doc}, allow_unicode=True)
    except yaml.YAMLError:
        text = "config: {}\n"
    for pos, junk in mangle:
        p = pos % (len(text) + 1)
        text = text[:p] + junk + text[p:]
    return text


COUNTS: collections.Counter = collections.Counter()


def _classify(fn) -> None:
    try:
        fn()
        COUNTS["accepted"] += 1
    except GpufleetError as e:
        assert str(e) and e.exit_code, "an error without a message"
        COUNTS["refused"] += 1


@settings(
    max_examples=EXAMPLES // 2,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(config)
def _structured(cfg: object) -> None:
    _classify(lambda: spec_from_config(cfg, stack="fuzz"))  # type: ignore[arg-type]


@settings(
    max_examples=EXAMPLES // 2,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(config, st.lists(st.tuples(st.integers(0, 10**6), st.sampled_from(MANGLE)), max_size=3))
def _as_text(cfg: object, mangle: list[tuple[int, str]]) -> None:
    text = _yaml_text(cfg, mangle)
    _classify(lambda: spec_from_config(parse_stack_yaml(text, "Pulumi.fuzz.yaml"), stack="fuzz"))


@pytest.mark.timeout(600)  # 5000 examples took 64 s on a shared 2-core machine: ~10x headroom
def test_every_stack_config_is_accepted_or_refused_with_our_error():
    COUNTS.clear()
    _structured()
    _as_text()
    print(f"\nstack configs: {dict(COUNTS)} (other: 0, else this test fails)")
    assert sum(COUNTS.values()) >= EXAMPLES * 0.9  # hypothesis may stop early on duplicates


def test_malformed_yaml_names_file_line_and_column():
    with pytest.raises(GpufleetError, match=r"Pulumi\.x\.yaml:2:\d+: not valid YAML"):
        parse_stack_yaml("config:\n\tgpufleet:cluster: {}\n", "Pulumi.x.yaml")


def test_a_config_that_is_not_a_mapping_is_refused_by_name():
    for doc in ("config: just a string\n", "config: [1, 2]\n", "config: 7\n"):
        with pytest.raises(GpufleetError, match="config"):
            parse_stack_yaml(doc, "Pulumi.x.yaml")
