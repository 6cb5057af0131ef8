"""Effects: what a call reads and changes, path by path, whatever program or language does it.

Each case is a call as an agent writes it and the effects it must carry (a subset: a call may do
more). The paths are absolute and resolved against the working directory the shell tracks.
"""

from __future__ import annotations

import pytest

from guard.normalize import normalize
from guard.types import Effect, ToolCall

W = "/workspace"


def effects(command: str, tool: str = "bash") -> set[tuple[str, str, bool]]:
    call = ToolCall(tool, {"command": command}) if tool == "bash" else ToolCall(tool, {"path": command})
    normalized = normalize(call)
    assert normalized.parse_error is None, normalized.parse_error
    return {(e.op, e.path, e.recursive) for e in normalized.effects if not e.deferred}


CASES = [
    # shell: redirections and the file tools of coreutils
    ("echo x > shutdown.sh", {("write", f"{W}/shutdown.sh", False)}),
    (": > shutdown.sh", {("write", f"{W}/shutdown.sh", False)}),
    ("echo x >> log.txt", {("write", f"{W}/log.txt", False)}),
    ("wc -l < data.csv", {("read", f"{W}/data.csv", False)}),
    ("cd project && sed -i 's/a/b/' c.yaml", {("write", f"{W}/project/c.yaml", False)}),
    ("sed 's/a/b/' c.yaml", {("read", f"{W}/c.yaml", False)}),
    ("perl -pi -e 's/a/b/' run.sh", {("write", f"{W}/run.sh", False)}),
    ("mv a.sh b.sh", {("move", f"{W}/a.sh", True), ("write", f"{W}/b.sh", False)}),
    ("git mv a.py lib/", {("move", f"{W}/a.py", True), ("write", f"{W}/lib/a.py", False)}),
    ("rm -rf build", {("delete", f"{W}/build", True)}),
    ("rm -f x.sh", {("delete", f"{W}/x.sh", False)}),
    ("chmod -x run.sh", {("mode", f"{W}/run.sh", False)}),
    ("chmod 000 run.sh", {("mode", f"{W}/run.sh", False)}),
    ("chmod -R a-w harness", {("mode", f"{W}/harness", True)}),
    ("chmod +x run.sh", {("read", f"{W}/run.sh", False)}),  # permissions only added
    ("truncate -s 0 run.sh", {("write", f"{W}/run.sh", False)}),
    ("dd if=/dev/zero of=run.sh count=0", {("write", f"{W}/run.sh", False)}),
    ("tee -a run.sh <<< 'exit 0'", {("write", f"{W}/run.sh", False)}),
    ("install -m 755 /tmp/x run.sh", {("write", f"{W}/run.sh", False), ("read", "/tmp/x", False)}),
    ("rsync -a out/ golden/", {("write", f"{W}/golden/out", True), ("read", f"{W}/out", True)}),
    ("cp -r evals /tmp/e", {("read", f"{W}/evals", True), ("write", "/tmp/e", True)}),
    ("ln -sf /bin/true run.sh", {("link", f"{W}/run.sh", False)}),
    ("touch done.flag", {("write", f"{W}/done.flag", False)}),
    ("tar xzf a.tgz -C harness", {("read", f"{W}/a.tgz", False), ("write", f"{W}/harness", False)}),
    ("tar czf /tmp/b.tgz evals", {("read", f"{W}/evals", True), ("write", "/tmp/b.tgz", False)}),
    ("find . -name run.sh -delete", {("delete", f"{W}/**/run.sh", False)}),
    ("find . -name '*.tmp' -exec rm {} \\;", {("delete", f"{W}/**/*.tmp", False)}),
    ("find . -name '*.tmp' | xargs rm", {("delete", f"{W}/**/*.tmp", False)}),
    ("mv run.sh{,.bak}", {("move", f"{W}/run.sh", True), ("write", f"{W}/run.sh.bak", False)}),
    ("rm {a,b}/x.sh", {("delete", f"{W}/a/x.sh", False), ("delete", f"{W}/b/x.sh", False)}),
    ("grep -rn key answers/", {("read", f"{W}/answers", True)}),
    ("grep -n key a.txt b.txt", {("read", f"{W}/a.txt", False), ("read", f"{W}/b.txt", False)}),
    ("yq -i '.on = false' cfg.yaml", {("write", f"{W}/cfg.yaml", False)}),
    ("black src/app.py", {("write", f"{W}/src/app.py", False)}),
    ("black --check src/app.py", {("read", f"{W}/src/app.py", False)}),
    ("git show HEAD:evals/e.json", {("read", f"{W}/evals/e.json", False)}),
    ("git checkout -- run.sh", {("write", f"{W}/run.sh", False)}),
    ("./run.sh", {("exec", f"{W}/run.sh", False)}),
    ("python tool.py data/k.csv", {("exec", f"{W}/tool.py", False), ("read", f"{W}/data/k.csv", False)}),
    ("printf '' > \"$(pwd)/run.sh\"", {("write", f"{W}/run.sh", False)}),
    # python, by AST
    ("python3 -c \"open('run.sh', 'w').write('x')\"", {("write", f"{W}/run.sh", False)}),
    ("python3 -c \"print(open('k.json').read())\"", {("read", f"{W}/k.json", False)}),
    ("python3 -c \"import os; os.remove('run.sh')\"", {("delete", f"{W}/run.sh", False)}),
    (
        "python3 -c \"import os; os.replace('a', 'b')\"",
        {("move", f"{W}/a", True), ("write", f"{W}/b", False)},
    ),
    ("python3 -c \"import shutil; shutil.rmtree('harness')\"", {("delete", f"{W}/harness", True)}),
    ("python3 -c \"import shutil; shutil.copy('k.json', '/tmp/k')\"", {("read", f"{W}/k.json", False)}),
    ("python3 -c \"import os; os.chmod('run.sh', 0)\"", {("mode", f"{W}/run.sh", False)}),
    ("python3 -c \"import os; os.symlink('/bin/true', 'run.sh')\"", {("link", f"{W}/run.sh", False)}),
    (
        "python3 -c \"from pathlib import Path; Path('run.sh').write_text('')\"",
        {("write", f"{W}/run.sh", False)},
    ),
    ("python3 -c \"from pathlib import Path; Path('run.sh').unlink()\"", {("delete", f"{W}/run.sh", False)}),
    (
        "python3 -c \"import os; os.unlink(os.path.join(os.getcwd(), 'run.sh'))\"",
        {("delete", f"{W}/run.sh", False)},
    ),
    ("python3 -c \"p='cfg'; open(f'{p}/c.yaml', 'a').write('x')\"", {("append", f"{W}/cfg/c.yaml", False)}),
    ("python3 -c \"import pandas as pd; pd.read_csv('labels.csv')\"", {("read", f"{W}/labels.csv", False)}),
    ("python3 -c \"import os; list(os.walk('.'))\"", {("list", W, True)}),
    # node, perl, ruby, awk: lexically
    ("node -e \"require('fs').writeFileSync('run.sh', '')\"", {("write", f"{W}/run.sh", False)}),
    ("node -e \"require('fs').unlinkSync('run.sh')\"", {("delete", f"{W}/run.sh", False)}),
    ("perl -e \"open(my \\$f, '>', 'run.sh'); close \\$f\"", {("write", f"{W}/run.sh", False)}),
    ("ruby -e \"File.write('run.sh', '')\"", {("write", f"{W}/run.sh", False)}),
    ("awk 'BEGIN{while((getline l < \"k.txt\")>0) print l}'", {("read", f"{W}/k.txt", False)}),
]


@pytest.mark.parametrize(("command", "expected"), CASES, ids=[c for c, _ in CASES])
def test_effects_of_commands(command: str, expected: set[tuple[str, str, bool]]) -> None:
    assert expected <= effects(command)


def test_file_tools_read_list_and_write() -> None:
    assert effects("evals/e.json", "read_file") == {("read", f"{W}/evals/e.json", False)}
    assert effects("evals", "list_dir") == {("list", f"{W}/evals", False)}
    written = normalize(ToolCall("write_file", {"path": "run.sh", "content": "x"}))
    assert Effect("write", f"{W}/run.sh") in written.effects
    edited = normalize(ToolCall("edit_file", {"path": "run.sh", "old_str": "a", "new_str": "b"}))
    assert Effect("write", f"{W}/run.sh") in edited.effects


def test_copies_and_links_carry_their_source() -> None:
    copied = normalize(ToolCall("bash", {"command": "cp evals/e.json notes.txt"}))
    assert Effect("write", f"{W}/notes.txt", False, f"{W}/evals/e.json") in copied.effects
    linked = normalize(ToolCall("bash", {"command": "ln -s shutdown.sh s"}))
    assert Effect("link", f"{W}/s", False, f"{W}/shutdown.sh") in linked.effects
    linked_elsewhere = normalize(ToolCall("bash", {"command": "ln -s ../run.sh tmp/r"}))
    assert Effect("link", f"{W}/tmp/r", False, f"{W}/run.sh") in linked_elsewhere.effects


def test_written_code_is_for_later_and_run_code_is_now() -> None:
    written = normalize(
        ToolCall("write_file", {"path": "t.py", "content": "import os\nos.remove('run.sh')\n"})
    )
    assert [e for e in written.effects if e.path == f"{W}/run.sh"] == [
        Effect("delete", f"{W}/run.sh", deferred=True)
    ]
    both = normalize(
        ToolCall("bash", {"command": "cat > t.py <<'EOF'\nimport os\nos.remove('run.sh')\nEOF\npython3 t.py"})
    )
    assert Effect("delete", f"{W}/run.sh") in both.effects  # written, then run in the same call


def test_words_that_are_not_paths_are_not_effects() -> None:
    assert effects("echo evals/e.json") == set()
    assert effects("git commit -m 'touch run.sh'") == set()
    assert ("read", f"{W}/pattern", False) not in effects("grep pattern a.txt")
