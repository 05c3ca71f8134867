"""A target's commits say what series.yaml says (not the patch file's header), with the trailers
naming the patch and the sha256 of its file."""

from __future__ import annotations

import hashlib

from rocmpatch import gitcmd, history


def test_each_commit_carries_its_entry_and_the_two_trailers(cli, project, tmp_path):
    series_yaml = project.series_dir / "series.yaml"
    series_yaml.write_text(series_yaml.read_text().replace("What first-fix changes.", "What series.yaml says first-fix changes.", 1))
    assert cli("lock").exit_code == 0  # the header follows series.yaml; so does the commit
    target = tmp_path / "Megatron-LM"
    assert cli("apply", "--target", str(target)).exit_code == 0
    repo = gitcmd.open_repo(target)
    applied = history.read(repo).applied
    assert [a.name for a in applied] == ["first-fix", "second-fix"]
    for patch in applied:
        sha256 = hashlib.sha256((project.series_dir / f"000{applied.index(patch) + 1}-{patch.name}.patch").read_bytes()).hexdigest()
        assert patch.sha256 == sha256
        message = gitcmd.run(repo, "log", "-1", "--format=%B", patch.commit)
        description = "What series.yaml says first-fix changes." if patch.name == "first-fix" else f"What {patch.name} changes."
        assert message.rstrip("\n") == (f"{patch.name}: test patch\n\n{description}\n\n"
                                        f"{history.NAME_TRAILER}: {patch.name}\n{history.SHA_TRAILER}: {sha256}")
