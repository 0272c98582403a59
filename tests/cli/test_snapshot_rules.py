"""Which files `gantry run` sends (git's ignore rules), the git state it records, and how it
reads gantry.yml: plain functions over real folders and a real git, no server."""

import subprocess

import pytest
from gantry_cli import snapshot, spec


def paths(tree):
    return [f.path for f in tree.files]


def write(root, files):
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_gitignore_rules_at_every_level_with_negation_and_gantryignore(tmp_path):
    write(tmp_path, {
        ".gitignore": "*.log\n!keep.log\nbuild/\n/data\n",
        ".gantryignore": "*.ckpt\n",
        "train.py": "", "run.log": "", "keep.log": "", "model.ckpt": "",
        "build/out.o": "", "src/build/deep.o": "", "data/big.bin": "", "src/data/small.txt": "",
        "src/.gitignore": "secret.txt\n!important.log\n",
        "src/secret.txt": "", "src/important.log": "", "src/other.log": "",
        ".git/config": "", ".gantry/state": "",
    })  # fmt: skip
    (tmp_path / "link.py").symlink_to("/etc/hostname")

    tree = snapshot.collect(tmp_path)

    assert paths(tree) == [
        ".gantryignore", ".gitignore", "keep.log", "src/.gitignore", "src/data/small.txt",
        "src/important.log", "train.py",
    ]  # fmt: skip
    assert tree.skipped_links == ["link.py"]


def test_extra_patterns_from_gantry_yml_apply_like_a_gantryignore(tmp_path):
    write(tmp_path, {"a.py": "", "notes/n.md": "", "notes/keep.md": ""})
    tree = snapshot.collect(tmp_path, ["notes/*", "!notes/keep.md"])
    assert paths(tree) == ["a.py", "notes/keep.md"]


def test_the_limit_names_the_biggest_files(tmp_path):
    write(tmp_path, {"train.py": "x"})
    (tmp_path / "huge.bin").write_bytes(b"\0" * (3 * 1024 * 1024))
    (tmp_path / "big.bin").write_bytes(b"\0" * (2 * 1024 * 1024))
    tree = snapshot.collect(tmp_path)
    with pytest.raises(snapshot.TooBig) as refused:
        snapshot.check_limits(tree, max_files=100, max_mb=4)
    assert "huge.bin (3.0 MiB), big.bin (2.0 MiB), train.py (1 B)" in str(refused.value)
    with pytest.raises(snapshot.TooBig, match="3 files \\(the limit is 2\\)"):
        snapshot.check_limits(tree, max_files=2, max_mb=100)
    snapshot.check_limits(tree, max_files=3, max_mb=6)  # within both limits: fine


def test_git_commit_branch_and_dirty_state_are_recorded(tmp_path):
    assert snapshot.git_state(tmp_path) is None
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    write(tmp_path, {"train.py": "print(1)\n"})
    subprocess.run([*git, "add", "train.py"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "first"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout

    assert snapshot.git_state(tmp_path) == {"commit": head.strip(), "dirty": False, "branch": "main"}
    write(tmp_path, {"train.py": "print(2)\n"})
    assert snapshot.git_state(tmp_path)["dirty"] is True


def test_hashes_are_the_contents_sha256(tmp_path):
    write(tmp_path, {"a.txt": "alpha"})
    tree = snapshot.collect(tmp_path)
    snapshot.hash_files(tree)
    assert tree.files[0].manifest() == {
        "path": "a.txt",
        "size": 5,
        "sha256": "8ed3f6ad685b959ead7022518e1af76cd816f8e8ec7ccdda1ed4018e8f2223f8",
        "mode": tree.files[0].mode,
    }


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("gpus: -1\n", "gpus: at least 0"),
        ("gpus: true\n", "gpus: a whole number"),
        ("kind: batch\n", "kind: one of train, distributed, notebook"),
        ("comand: x\n", "unknown field 'comand'"),
        ("parameters: [1, 2]\n", "parameters: a mapping"),
        ("parameters: {lr: {a: 1}}\n", "parameters.lr: a plain value"),
        ("command: ''\n", "command: a command line or a list of words"),
        ("- just\n- a list\n", "a mapping of fields"),
        ("project: [unclosed\n", "not valid YAML (line 2"),
        ("inputs: [{}]\n", "inputs[0]"),
    ],
)
def test_gantry_yml_errors_name_the_field(tmp_path, text, message):
    path = tmp_path / "gantry.yml"
    path.write_text(text)
    with pytest.raises(spec.SpecError) as refused:
        spec.load(path)
    assert message in str(refused.value)
    assert str(path) in str(refused.value)


def test_gantry_yml_normalizes_what_the_api_takes(tmp_path):
    path = tmp_path / "gantry.yml"
    path.write_text(
        "project: lab-a/vision\ncommand: [python, train.py, --note, 'two words']\n"
        "gpus: 2\nenv: {SEED: 1}\ninputs: [12]\nignore: data/\n"
    )
    assert spec.load(path) == {
        "project": "lab-a/vision",
        "command": "python train.py --note 'two words'",
        "gpus": 2,
        "env": {"SEED": "1"},
        "inputs": [{"dataset_version": 12}],
        "ignore": ["data/"],
    }


def test_gantry_yml_fields_are_the_job_apis_with_its_limits():
    """gantry.yml is checked before anything is uploaded; the API checks again on submit.
    The two must agree: every field gantry.yml takes (but its own `ignore`, and `image` and
    `project`, which the CLI resolves by name) is a JobSubmit field with the same minimum."""
    from jobs.api import JobSubmitSerializer

    api = JobSubmitSerializer().fields
    assert set(spec.FIELDS) - {"ignore"} <= set(api)
    for name in ("gpus", "cpus", "memory_mb", "workers", "timeout_seconds", "max_retries"):
        with pytest.raises(spec.SpecError):
            spec.validate({name: api[name].min_value - 1})
        assert spec.validate({name: api[name].min_value}) == {name: api[name].min_value}
    assert set(spec.KINDS) == set(api["kind"].choices)


def test_shell_completion_completes_commands_and_subcommands():
    import os
    import subprocess
    import sys

    def complete(words: str) -> list[str]:
        env = {**os.environ, "_GANTRY_COMPLETE": "complete_bash", "COMP_WORDS": words,
               "COMP_CWORD": str(len(words.split()) - 1)}  # fmt: skip
        done = subprocess.run([sys.executable, "-m", "gantry_cli"], env=env, capture_output=True,
                              text=True, timeout=60)  # fmt: skip
        return done.stdout.split()

    assert complete("gantry da") == ["datasets"]
    assert complete("gantry datasets p") == ["push", "pull"]
