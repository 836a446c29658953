"""dflash_host/host/fileattrs.py: the one place a task module's mode, owner and group are read and set (file, copy
with and without a manifest, lineinfile)."""

from __future__ import annotations

import os
import stat

import pytest

from dflash_host.host.fileattrs import lookup_gid, lookup_uid, new_file_mode, octal_mode, set_attributes
from dflash_host.module import ModuleError


@pytest.mark.skipif(os.geteuid() != 0, reason="changing owners needs root")
def test_an_owner_change_keeps_the_setuid_bit_the_mode_asks_for(tmp_path):
    f = tmp_path / "f"
    f.write_text("x")
    os.chmod(f, 0o4755)
    diff: dict = {}
    assert set_attributes(str(f), 0o4755, "65534", None, False, diff) is True
    assert (stat.S_IMODE(f.stat().st_mode), f.stat().st_uid) == (0o4755, 65534)  # the kernel's chown cleared it
    assert diff == {"before": {"owner": 0, "mode": "0755"}, "after": {"owner": 65534, "mode": "04755"}}  # Ansible's


def test_an_owner_or_group_the_host_lacks_in_ansibles_words_or_in_the_words_lineinfile_and_a_manifest_keep():
    with pytest.raises(ModuleError, match=r"^chown failed: failed to look up user dfp-no-such-user; create"):
        lookup_uid("dfp-no-such-user")
    with pytest.raises(ModuleError, match=r"^owner 'dfp-no-such-user' does not exist on this host; create the user"):
        lookup_uid("dfp-no-such-user", ansible_words=False)
    with pytest.raises(ModuleError, match=r"^chgrp failed: failed to look up group dfp-no-such-group; create"):
        lookup_gid("dfp-no-such-group")
    with pytest.raises(ModuleError, match=r"^group 'dfp-no-such-group' does not exist on this host; create it"):
        lookup_gid("dfp-no-such-group", ansible_words=False)
    assert (lookup_uid("7"), lookup_uid(7), lookup_gid(None)) == (7, 7, None)  # a number, or a uid looked up


def test_octal_mode_takes_octal_only():
    assert (octal_mode("0750"), octal_mode("644"), octal_mode(None)) == (0o750, 0o644, None)
    with pytest.raises(ModuleError, match="mode 'u\\+rw' is not an octal number"):
        octal_mode("u+rw")
    with pytest.raises(ModuleError, match="out of range 0000-7777"):
        octal_mode("77777")


def test_a_new_file_gets_0666_less_the_umask():
    old = os.umask(0o027)
    try:
        assert new_file_mode() == 0o640
    finally:
        os.umask(old)
