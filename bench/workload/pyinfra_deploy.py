"""The benchmark workload for pyinfra: the same 11 tasks as ours.yaml (run with --data base=...).

pyinfra has no `creates` or `assert`: the command is guarded by a File fact and the assertion is
plain Python on that fact, which is how pyinfra deploys express both.
"""

from io import StringIO

from pyinfra import host
from pyinfra.facts.files import File
from pyinfra.operations import files, server

base = host.data.base

for d in ("a", "b", "c"):
    files.directory(name=f"Directory {d}", path=f"{base}/{d}", mode="755")
for d, n in (("a", "one"), ("b", "two"), ("c", "three")):
    files.put(name=f"File {n}", src=StringIO(f"{n}\n"), dest=f"{base}/{d}/{n}.txt", mode="644")
if not host.get_fact(File, path=f"{base}/marker"):
    server.shell(name="Command with creates", commands=[f"touch {base}/marker"])
one = host.get_fact(File, path=f"{base}/a/one.txt")  # the stat
# the assert (on a first run the file is made by the operations above, after facts were read)
assert one is None or one["size"] == 4, f"{base}/a/one.txt: {one}"  # noqa: S101 - the workload's assert task, in pyinfra's idiom
files.line(name="A line in a file", path=f"{base}/settings.conf", line="bench=1", present=True)
server.shell(name="Read-only command", commands=["uname -r"])
