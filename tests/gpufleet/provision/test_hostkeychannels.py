"""Reading the host keys a cloud node published: each channel's answer in its documented shape."""

from __future__ import annotations

import json

import pytest

from gpufleet.provision import hostkeychannels as hkc
from gpufleet.provision import hostkeypin

# Keys made with ssh-keygen for these tests (never a real node's).
ED = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGssmszZEJr8sA+/nZ2RbsphpLsly3/C7TYAcLU6tZB+"
ED2 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIM46WOnVsHKAiOfwR0GXhDfnGTisXxSvBiZV/THlwdTS"
ECDSA = (
    "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBBrGC87YDwuGg0B92F3X"
    "AixIjs6kG3nuNxvmXtckEoFYO7097r4vwoNy1Aqh9kyyjlGfMeD7NIUiN5OlIeJvuEk="
)

# The shapes, each written from its source (read 2026-11-25):
# - GCE REST instances.getGuestAttributes, https://cloud.google.com/compute/docs/reference/rest/
#   v1/instances/getGuestAttributes: {"kind": "compute#guestAttributes", "queryPath": ...,
#   "queryValue": {"items": [{"namespace", "key", "value"}]}, "selfLink": ...}; google-guest-agent
#   (GoogleCloudPlatform/guest-agent, instance_setup.go generateSSHKeys) writes the key
#   "hostkeys/<type>" with the .pub's second field (the base64) as value. `gcloud compute
#   instances get-guest-attributes --query-path` prints the items.
GCE_REST = {
    "kind": "compute#guestAttributes",
    "queryPath": "hostkeys/",
    "queryValue": {
        "items": [
            {"namespace": "hostkeys", "key": k.split()[0], "value": k.split()[1]}
            for k in (ECDSA, ED)
        ]
    },
    "selfLink": "https://www.googleapis.com/compute/v1/projects/p/zones/z/instances/n"
    "/getGuestAttributes?queryPath=hostkeys/",
}
# - cloud-init keys_to_console (https://docs.cloud-init.io/en/latest/reference/modules.html,
#   "Keys to Console": emit_keys_to_console, default true), printed by its
#   tools/write-ssh-key-fingerprints through `logger --stderr -t ec2` between
#   "-----BEGIN SSH HOST KEY KEYS-----" and "-----END SSH HOST KEY KEYS-----", one .pub per line;
#   EC2 GetConsoleOutput (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/
#   API_GetConsoleOutput.html) returns the serial console, which wraps lines at 80 columns.


def _wrapped(text: str, width: int = 80) -> str:
    """A serial console's view: each line cut at `width` columns."""
    return "".join(
        "".join(line[k : k + width] + "\n" for k in range(0, max(len(line), 1), width))
        for line in text.splitlines()
    )


FP = "SHA256:vNX+ZIDSmffuVdgxdfZXUu04AhP2qeecwZwWOK4N08g"
EC2_CONSOLE = _wrapped(
    f"""[   12.3] cloud-init[1011]: Cloud-init v. 24.4 running 'modules:final'
<14>Nov 25 12:00:01 ec2:
<14>Nov 25 12:00:01 ec2: #############################################################
<14>Nov 25 12:00:01 ec2: -----BEGIN SSH HOST KEY FINGERPRINTS-----
<14>Nov 25 12:00:01 ec2: 256 {FP} root@ip-10-42-0-10 (ED25519)
<14>Nov 25 12:00:01 ec2: -----END SSH HOST KEY FINGERPRINTS-----
<14>Nov 25 12:00:01 ec2: #############################################################
<14>Nov 25 12:00:01 ec2: -----BEGIN SSH HOST KEY KEYS-----
<14>Nov 25 12:00:01 ec2: {ECDSA} root@ip-10-42-0-10
<14>Nov 25 12:00:01 ec2: {ED} root@ip-10-42-0-10
<14>Nov 25 12:00:01 ec2: -----END SSH HOST KEY KEYS-----
[   12.9] cloud-init[1011]: Cloud-init v. 24.4 finished
"""
)
# - Azure boot diagnostics serial log (https://learn.microsoft.com/azure/virtual-machines/
#   boot-diagnostics; `az vm boot-diagnostics get-boot-log`): the same console, CRLF line ends
#   (a serial port), the older unprefixed form of the block.
AZURE_SERIAL = (
    "[    0.000000] Linux version 6.8.0-1017-azure\r\n"
    "-----BEGIN SSH HOST KEY KEYS-----\r\n"
    f"{ED} root@node-0\r\n"
    "-----END SSH HOST KEY KEYS-----\r\n"
    "Ubuntu 22.04.5 LTS node-0 ttyS0\r\n"
)


def test_gce_guest_attributes_rest_answer():
    assert hkc.from_guest_attributes(json.dumps(GCE_REST)) == [ECDSA, ED]
    assert hkc.pinned_key(hkc.from_guest_attributes(json.dumps(GCE_REST))) == ED


def test_gce_guest_attributes_as_gcloud_prints_the_items():
    items = GCE_REST["queryValue"]["items"]
    assert hkc.pinned_key(hkc.from_guest_attributes(json.dumps(items))) == ED


def test_gce_nothing_published_yet_is_no_key():
    assert hkc.from_guest_attributes("") == []
    assert hkc.from_guest_attributes('{"kind": "compute#guestAttributes", "queryValue": {}}') == []


def test_gce_a_value_that_is_not_a_whole_key_of_its_type_is_ignored():
    bad = [
        {"namespace": "hostkeys", "key": "ssh-ed25519", "value": ED.split()[1][:-8]},
        {"namespace": "hostkeys", "key": "ssh-rsa", "value": ED.split()[1]},  # type mismatch
        {"namespace": "other", "key": "ssh-ed25519", "value": ED2.split()[1]},
    ]
    assert hkc.from_guest_attributes(json.dumps(bad)) == []


def test_ec2_console_with_logger_prefixes_and_lines_wrapped_at_80_columns():
    assert max(len(line) for line in EC2_CONSOLE.splitlines()) <= 80
    assert ED not in EC2_CONSOLE  # cut inside its base64
    assert hkc.from_console(EC2_CONSOLE) == [ECDSA, ED]


def test_azure_serial_log_with_crlf():
    assert hkc.from_console(AZURE_SERIAL) == [ED]


def test_console_before_cloud_init_printed_is_no_key():
    assert hkc.from_console("[    0.0] Linux version\n") == []
    assert hkc.from_console("None") == []  # aws --output text with no output yet


def test_console_with_a_second_block_is_refused_not_guessed():
    # EC2 Serial Console / Azure serial console users can type at a login prompt that may come
    # before cloud-init's block: a forged block first, or after, or an unclosed BEGIN
    forged = AZURE_SERIAL.replace(ED, ED2)
    unclosed = "-----BEGIN SSH HOST KEY KEYS-----\r\n" + ED2 + "\r\n"
    for text in (forged + AZURE_SERIAL, AZURE_SERIAL + forged, unclosed + AZURE_SERIAL):
        with pytest.raises(hkc.AmbiguousHostKeys) as e:
            hkc.from_console(text)
        assert e.value.exit_code == 3 and "ambiguous host key block" in e.value.message
        assert "GPUFLEET_HOST_KEYS=bootstrap" in (e.value.hint or "")


def test_read_keys_fails_closed_on_an_ambiguous_console():
    forged = AZURE_SERIAL.replace(ED, ED2) + AZURE_SERIAL
    at = {"node-0": "arn:aws:ec2:us-east-1:1:instance/i-0abc"}
    with pytest.raises(hkc.AmbiguousHostKeys):
        hostkeypin.read_keys("aws", at, lambda m: None, 60, call=lambda argv: (True, forged))


def test_console_a_cut_key_is_no_key():
    cut = AZURE_SERIAL.replace(ED, ED[:-10])
    assert hkc.from_console(cut) == []


def test_commands_from_each_clouds_instance_reference():
    gce = hkc.CHANNELS["guest-attributes"].command(
        "https://www.googleapis.com/compute/v1/projects/p1/zones/us-central1-a/instances/vm-0"
    )
    assert gce[:5] == ["gcloud", "compute", "instances", "get-guest-attributes", "vm-0"]
    assert {"--zone=us-central1-a", "--project=p1", "--query-path=hostkeys/"} <= set(gce)
    ec2 = hkc.CHANNELS["console"].command(
        "arn:aws:ec2:eu-west-1:123456789012:instance/i-0123456789abcdef0"
    )
    assert ec2[:3] == ["aws", "ec2", "get-console-output"]
    assert {"--instance-id=i-0123456789abcdef0", "--region=eu-west-1", "--latest"} <= set(ec2)
    vm = "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/n-0"
    assert hkc.CHANNELS["serial-log"].command(vm) == [
        "az", "vm", "boot-diagnostics", "get-boot-log", "--ids", vm,
    ]  # fmt: skip
    with pytest.raises(hkc.GpufleetError):
        hkc.CHANNELS["console"].command("i-0123")


def test_only_cloud_providers_have_a_channel():
    assert hkc.channel("local") is None and hkc.channel("vm") is None
    assert hkc.channel("ssh") is None
    assert {hkc.channel(c).tool for c in ("aws", "gcp", "azure")} == {"aws", "gcloud", "az"}


def test_read_keys_asks_until_every_node_published():
    answers = {"node-0": ["None", EC2_CONSOLE], "node-1": [AZURE_SERIAL]}
    calls: list[str] = []

    def call(argv):
        node = "node-0" if "i-00000000000000000" in argv[3] else "node-1"
        calls.append(node)
        return True, answers[node].pop(0)

    at = {
        "node-0": "arn:aws:ec2:us-east-1:1:instance/i-00000000000000000",
        "node-1": "arn:aws:ec2:us-east-1:1:instance/i-00000000000000001",
    }
    got = hostkeypin.read_keys("aws", at, lambda m: None, 600, call=call, sleep=lambda s: None)
    assert got == {"node-0": ED, "node-1": ED}
    # the first round asks both nodes (at once: in either order), the second only node-0
    assert sorted(calls[:2]) == ["node-0", "node-1"] and calls[2:] == ["node-0"]


def test_a_poll_round_asks_every_node_at_once():
    """Each cloud CLI call takes a second or two: a round over N nodes must not take N of them.
    The fake call returns only once both nodes' calls are in flight together."""
    import threading

    both = threading.Barrier(2, timeout=10)

    def call(argv):
        both.wait()  # raises BrokenBarrierError when the calls run one after another
        return True, EC2_CONSOLE

    at = {
        "node-0": "arn:aws:ec2:us-east-1:1:instance/i-00000000000000000",
        "node-1": "arn:aws:ec2:us-east-1:1:instance/i-00000000000000001",
    }
    got = hostkeypin.read_keys("aws", at, lambda m: None, 600, call=call, sleep=lambda s: None)
    assert got == {"node-0": ED, "node-1": ED}


def test_read_keys_gives_up_at_the_deadline_naming_the_fallback():
    now = [0.0]
    lines: list[str] = []

    def sleep(s):
        now[0] += s

    with pytest.raises(hostkeypin.HostKeysUnpublished) as e:
        hostkeypin.read_keys(
            "gcp",
            {"node-0": "https://x/projects/p/zones/z/instances/n"},
            lines.append,
            60,
            call=lambda argv: (False, "ERROR: (gcloud) NOT_FOUND: guest attributes not found"),
            sleep=sleep,
            clock=lambda: now[0],
        )
    assert "node-0" in str(e.value) and "NOT_FOUND" in str(e.value)
    assert "GPUFLEET_HOST_KEYS=bootstrap" in (e.value.hint or "")
    assert sum("NOT_FOUND" in line for line in lines) == 1  # said once, not every poll
    assert e.value.exit_code == 3


def test_missing_cli_is_refused_before_anything_is_created():
    with pytest.raises(hostkeypin.HostKeysUnpublished) as e:
        hostkeypin.require_channel("azure", which=lambda tool: None)
    assert "az is not on PATH" in str(e.value)
    assert "GPUFLEET_HOST_KEYS=bootstrap" in (e.value.hint or "")
    hostkeypin.require_channel("local", which=lambda tool: None)  # no channel: nothing asked


def test_bootstrap_is_asked_by_env_only():
    assert hostkeypin.bootstrap_asked({"GPUFLEET_HOST_KEYS": "bootstrap"})
    assert not hostkeypin.bootstrap_asked({})
    with pytest.raises(hkc.GpufleetError):
        hostkeypin.bootstrap_asked({"GPUFLEET_HOST_KEYS": "tofu"})


def _info(tmp_path, host_key=""):
    from gpufleet.components.clusterinfo import ClusterInfo, NodeInfo

    return ClusterInfo(
        name="c",
        cloud="azure",
        nodes=[
            NodeInfo(name="node-0", private_ip="10.0.0.4", public_ip="198.51.100.7"),
            NodeInfo(name="node-1", private_ip="10.0.0.5", host_key=host_key),
        ],
        ssh_user="u",
        ssh_key_path=str(tmp_path / "k"),
        known_hosts_path=str(tmp_path / "known_hosts"),
    )


def test_pin_published_writes_known_hosts_before_any_connection(tmp_path):
    info = _info(tmp_path)
    vm = "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/"
    hostkeypin.pin_published(
        info,
        {"node-0": vm + "n-0", "node-1": vm + "n-1"},
        lambda m: None,
        60,
        call=lambda argv: (True, AZURE_SERIAL if argv[-1].endswith("0") else AZURE_SERIAL),
        sleep=lambda s: None,
    )
    assert [n.host_key for n in info.nodes] == [ED, ED]
    assert not any(n.bootstrap_host_key for n in info.nodes)
    text = (tmp_path / "known_hosts").read_text()
    assert f"198.51.100.7 {ED}" in text and f"10.0.0.4 {ED}" in text and f"10.0.0.5 {ED}" in text


def test_a_node_without_key_or_channel_is_refused(tmp_path):
    with pytest.raises(hostkeypin.HostKeysUnpublished):
        hostkeypin.pin_published(_info(tmp_path, host_key=ED2), {}, lambda m: None, 60)


def test_up_destroys_the_stack_when_no_key_can_be_pinned(tmp_path, monkeypatch):
    from gpufleet.provision import pulumi as prov

    info = _info(tmp_path)
    info.provider["host_keys_at"] = {"node-0": "x", "node-1": "y"}
    downed: list[str] = []
    monkeypatch.setattr(prov, "find_pulumi", lambda: "pulumi")
    monkeypatch.setattr(prov, "_import_sdk", lambda cloud=None: None)
    monkeypatch.setattr(prov, "with_ssh_cidrs", lambda spec: spec)
    monkeypatch.setattr(hostkeypin, "require_channel", lambda cloud: None)
    monkeypatch.setattr(prov, "stack_resources", lambda name, backend: None)  # a new stack
    monkeypatch.setattr(prov.PulumiProvisioner, "_up_in_zone", lambda self, s, p, b: info)
    monkeypatch.setattr(prov.PulumiProvisioner, "down", lambda self, i, p: downed.append(i.name))

    def unpublished(*a, **kw):
        raise hostkeypin.HostKeysUnpublished("no key")

    monkeypatch.setattr(hostkeypin, "read_keys", unpublished)

    class Spec:
        name, cloud, zone_choices = "c", "azure", []

    with pytest.raises(hostkeypin.HostKeysUnpublished):
        prov.PulumiProvisioner().up(Spec(), lambda m: None)  # type: ignore[arg-type]
    assert downed == ["c"]
