"""copy with `src:` from the control node keeps the task's mode, owner and group (they were dropped before: the
prompts copy's mode 0600 was not applied), and `remote_src: true` leaves src to the host module, as Ansible's."""

from __future__ import annotations

import os
import pwd
import stat

import yaml

from engine.api import run_playbook

INV = {"all": {"hosts": {"h": {"ansible_connection": "local"}}}}


def run(tmp_path, tasks):
    path = tmp_path / "pb.yaml"
    path.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": tasks}], sort_keys=False))
    return run_playbook(str(path), inventory=INV)


def test_mode_owner_and_group_reach_the_files_and_a_second_run_changes_nothing(tmp_path):
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "prompts.jsonl").write_text('{"prompt": "x"}\n')
    os.chmod(tmp_path / "files" / "prompts.jsonl", 0o644)
    dest = tmp_path / "out"
    nobody = pwd.getpwnam("nobody")
    tasks = [{"name": "put", "copy": {"src": "prompts.jsonl", "dest": f"{dest}/", "mode": "0600",
                                      "owner": "nobody"}}]
    first = run(tmp_path, tasks)
    assert first.exit_code == 0, first.tasks
    st = (dest / "prompts.jsonl").stat()
    assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == nobody.pw_uid
    again = run(tmp_path, tasks)
    assert again.exit_code == 0 and again.recap["h"]["changed"] == 0, again.tasks


def test_remote_src_copies_a_file_already_on_the_host(tmp_path):
    (tmp_path / "here.txt").write_text("on the host\n")
    tasks = [{"name": "copy there", "copy": {"src": str(tmp_path / "here.txt"), "dest": str(tmp_path / "there.txt"),
                                             "remote_src": True, "mode": "0640"}}]
    res = run(tmp_path, tasks)
    assert res.exit_code == 0, res.tasks
    assert (tmp_path / "there.txt").read_text() == "on the host\n"
    assert stat.S_IMODE((tmp_path / "there.txt").stat().st_mode) == 0o640
    assert res.results[0].result.get("src") == str(tmp_path / "here.txt")  # the host module's result, not an upload


def test_template_takes_force_and_validate_as_ansibles(tmp_path):
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "conf.j2").write_text("port={{ 80 + 1 }}\n")
    dest = tmp_path / "app.conf"
    dest.write_text("kept\n")
    keep = [{"name": "no force", "template": {"src": "conf.j2", "dest": str(dest), "force": False}}]
    assert run(tmp_path, keep).exit_code == 0 and dest.read_text() == "kept\n"
    bad = [{"name": "refused", "template": {"src": "conf.j2", "dest": str(dest), "validate": "grep -q nomatch %s"}}]
    res = run(tmp_path, bad)
    assert res.exit_code == 2 and dest.read_text() == "kept\n", res.tasks  # validate failed: dest untouched
    good = [{"name": "valid", "template": {"src": "conf.j2", "dest": str(dest), "validate": "grep -q port= %s"}}]
    assert run(tmp_path, good).exit_code == 0 and dest.read_text() == "port=81\n"


def test_a_folder_sends_a_vaulted_file_decrypted_and_without_a_password_fails_in_ansibles_words(tmp_path, monkeypatch):
    """A vault-encrypted file inside a copied folder arrives as its plaintext (decrypt: true, as Ansible's); with
    no vault password the task fails, its message ending as Ansible's (its copy target reads that ending)."""
    import subprocess

    from engine.parsing import vault
    from tests.helpers import required_ansible_tool

    (tmp_path / "pw").write_text("s3cret\n")
    tree = tmp_path / "files" / "tree"
    tree.mkdir(parents=True)
    (tree / "secret.txt").write_text("plain words\n")
    subprocess.run([str(required_ansible_tool("ansible-vault")), "encrypt", "--vault-password-file",
                    str(tmp_path / "pw"), str(tree / "secret.txt")], check=True, capture_output=True,
                   env={"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path)})
    task = {"name": "put", "copy": {"src": "tree", "dest": str(tmp_path / "out")}}
    monkeypatch.delenv("ANSIBLE_VAULT_PASSWORD_FILE", raising=False)
    vault.use_password_file(None)
    refused = run(tmp_path, [task])
    msg = refused.find("put")[0].result["msg"]
    assert msg.endswith(f"A vault password or secret must be specified to decrypt {tree / 'secret.txt'}"), msg
    assert not (tmp_path / "out").exists()
    vault.use_password_file(str(tmp_path / "pw"))
    try:
        sent = run(tmp_path, [task])
    finally:
        vault.use_password_file(None)
    assert sent.exit_code == 0 and (tmp_path / "out" / "tree" / "secret.txt").read_text() == "plain words\n"
