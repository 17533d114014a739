"""The sections of the side-by-side benchmark (scripts/bench.py, run by scripts/bench.sh): `runners`
holds what every section shares (running and timing a command, measuring tools side by side, the
workloads, ferry's configs, nginx's log), `servers` the servers they start (nginx, sshd,
SeaweedFS, the site cache), and each other module one section or a family of them: `pull` (1 GiB,
the unchanged tree, the agent at rest, the kill at half), `small` (10,000 small files, a real tree),
`manifests` (1,000,000 entries, manifest formats, generations), `push`, `s3`, `sftp`, `delta`,
`realdata` (with `realdata_sets`, which builds its data: a Debian root, a SQLite database, a native
library), `wan` (the same servers behind scripts/wanrelay.py) and `fleet`; `report` writes
docs/benchmarks.md. A new section is a module with a function `(ferry, runs) -> [section, ...]`,
listed in bench.py's SECTIONS."""
