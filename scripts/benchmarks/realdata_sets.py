"""The real-data sets of the `realdata` section: (old, new) pairs of files made with the machine's
tools, each the kind of large file a fleet updates: a Debian root as a tar and as an ext4 image
(minbase, then a few packages installed), a SQLite database before and after a batch of updates,
and a large native library from two adjacent releases of a PyPI wheel.

They are built once into a cache outside tmpfs and the repository (bench.py wipes BASE at every
start; a debootstrap takes minutes), BENCH_REALDATA_CACHE or /var/tmp/ferry-bench-data, in a folder
named by the recipe's version: a change to a recipe bumps RECIPE and the sets are built again. Each
file is written under a temporary name and renamed when whole, so an interrupted build is redone."""
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import zipfile

RECIPE = "v1"
CACHE = os.path.join(os.environ.get("BENCH_REALDATA_CACHE", "/var/tmp/ferry-bench-data"), RECIPE)
MIRROR = "http://deb.debian.org/debian"
PACKAGES = ["curl", "openssh-client", "python3-minimal"]
# Fixed, so that the images are the same bytes whenever the roots are: the filesystem's UUID, its
# directory hash seed, and the time mke2fs writes into the superblock (E2FSPROGS_FAKE_TIME).
EXT4_UUID = "6b3f3c52-5d2e-4b8a-9a57-3b1f0c0e7a11"
EXT4_TIME = "1700000000"
WHEEL = ("pyarrow", "15.0.1", "15.0.2")


def sh(cmd, **kw):
    """Runs `cmd` (a list), failing the benchmark if it fails; its output goes to stderr."""
    print("  $ " + " ".join(cmd), file=sys.stderr)
    subprocess.run(cmd, check=True, stdout=sys.stderr, **kw)


def built(*paths):
    """Whether every path exists (a set is rebuilt only when a file of it is missing)."""
    return all(os.path.exists(p) for p in paths)


def image_clean(root):
    """What an image build removes from a root before it ships it: apt's cache of packages
    (`apt-get clean`) and its package lists (debootstrap leaves both)."""
    sh(["chroot", root, "apt-get", "clean"])
    lists = root + "/var/lib/apt/lists"
    for name in os.listdir(lists):
        if name not in ("lock", "partial", "auxfiles"):
            os.unlink(os.path.join(lists, name))


def debian_roots():
    """CACHE/debian/old: `debootstrap --variant=minbase bookworm`; CACHE/debian/new: a copy of it
    (`cp -a`) with PACKAGES installed in a chroot (services kept from starting by a policy-rc.d,
    /proc mounted for apt and unmounted after). Each cleaned as an image build does (image_clean).
    Returns (old root, new root)."""
    d = os.path.join(CACHE, "debian")
    old, new = d + "/old", d + "/new"
    if built(d + "/roots.done"):
        return old, new
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    sh(["debootstrap", "--variant=minbase", "bookworm", old, MIRROR], stderr=subprocess.STDOUT)
    image_clean(old)
    sh(["cp", "-a", old, new])
    policy = new + "/usr/sbin/policy-rc.d"
    open(policy, "w").write("#!/bin/sh\nexit 101\n")
    os.chmod(policy, 0o755)
    sh(["mount", "-t", "proc", "proc", new + "/proc"])
    try:
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive", LC_ALL="C")
        sh(["chroot", new, "apt-get", "update", "-qq"], env=env)
        sh(["chroot", new, "apt-get", "install", "-y", "-qq", "--no-install-recommends"] + PACKAGES, env=env)
    finally:
        sh(["umount", new + "/proc"])
    os.unlink(policy)
    image_clean(new)
    open(d + "/roots.done", "w").write(" ".join(PACKAGES) + "\n")
    return old, new


def debian_tars(old_root, new_root):
    """CACHE/tar/old.tar and new.tar: each root as `tar --sort=name --numeric-owner`."""
    d = os.path.join(CACHE, "tar")
    old, new = d + "/old.tar", d + "/new.tar"
    if not built(old, new):
        os.makedirs(d, exist_ok=True)
        for root, out in ((old_root, old), (new_root, new)):
            sh(["tar", "--sort=name", "--numeric-owner", "-cf", out + ".tmp", "-C", root, "."])
            os.rename(out + ".tmp", out)
    return old, new


def du_bytes(root):
    """The space the files under `root` take, in bytes (du's count of blocks)."""
    return int(subprocess.run(["du", "-s", "-B1", "-x", root], capture_output=True, text=True,
                              check=True).stdout.split()[0])


def debian_images(old_root, new_root):
    """CACHE/ext4/old.img and new.img: each root as an ext4 image (`mkfs.ext4 -d`, 4 KiB blocks,
    fixed UUID, hash seed and time), both of one size: the larger root's usage plus a quarter,
    rounded up to 64 MiB. Each is checked with `e2fsck -fn`."""
    d = os.path.join(CACHE, "ext4")
    old, new = d + "/old.img", d + "/new.img"
    if built(old, new):
        return old, new
    os.makedirs(d, exist_ok=True)
    step = 64 << 20
    size = -(-max(du_bytes(old_root), du_bytes(new_root)) * 5 // 4 // step) * step
    env = dict(os.environ, E2FSPROGS_FAKE_TIME=EXT4_TIME, SOURCE_DATE_EPOCH=EXT4_TIME)
    for root, out in ((old_root, old), (new_root, new)):
        if os.path.exists(out + ".tmp"):
            os.unlink(out + ".tmp")
        sh(["mkfs.ext4", "-q", "-F", "-b", "4096", "-d", root, "-U", EXT4_UUID, "-E",
            f"hash_seed={EXT4_UUID},root_owner=0:0", out + ".tmp", str(size // 1024) + "k"], env=env)
        sh(["e2fsck", "-fn", out + ".tmp"], env=env)
        os.rename(out + ".tmp", out)
    return old, new


WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa quebec "
         "romeo sierra tango uniform victor whiskey xray yankee zulu sync mirror fleet agent manifest chunk piece "
         "index remote local server client update version release image kernel package library database table "
         "row column page journal commit rollback vacuum query select insert delete order group limit").split()


def text(rng, words):
    """`words` words drawn by `rng`, as a sentence."""
    return " ".join(rng.choice(WORDS) for _ in range(words))


def sqlite_fill(path):
    """A database of about 190 MB at `path`: accounts (with an index on e-mail), messages (indexed by
    account and time) and attachments (blobs, indexed by message), from a fixed seed."""
    rng = random.Random(2024)
    db = sqlite3.connect(path)
    db.executescript("""
      CREATE TABLE accounts (id INTEGER PRIMARY KEY, name TEXT, email TEXT, created INTEGER, balance REAL, bio TEXT);
      CREATE TABLE messages (id INTEGER PRIMARY KEY, account INTEGER, sent INTEGER, subject TEXT, body TEXT);
      CREATE TABLE attachments (id INTEGER PRIMARY KEY, message INTEGER, name TEXT, data BLOB);""")
    with db:
        db.executemany("INSERT INTO accounts VALUES (?, ?, ?, ?, ?, ?)",
                       ((i, text(rng, 2), f"user{i}@example.org", 1600000000 + i * 37, rng.random() * 1e4,
                         text(rng, rng.randint(5, 25))) for i in range(1, 200001)))
        db.executemany("INSERT INTO messages VALUES (?, ?, ?, ?, ?)",
                       ((i, rng.randint(1, 200000), 1600000000 + i * 11, text(rng, 6), text(rng, rng.randint(10, 60)))
                        for i in range(1, 300001)))
        db.executemany("INSERT INTO attachments VALUES (?, ?, ?, ?)",
                       ((i, rng.randint(1, 300000), f"file{i}.bin", rng.randbytes(rng.randint(512, 4096)))
                        for i in range(1, 15001)))
    db.executescript("""
      CREATE UNIQUE INDEX accounts_email ON accounts (email);
      CREATE INDEX messages_account ON messages (account, sent);
      CREATE INDEX attachments_message ON attachments (message);""")
    db.close()


def sqlite_update(path):
    """A batch of updates to the database at `path`, as an application's day: 2% of the accounts
    and 2% of the messages updated at scattered rows, 4,000 messages and 300 attachments inserted,
    3,000 messages deleted with their attachments. No VACUUM: the freed pages stay free."""
    rng = random.Random(2025)
    db = sqlite3.connect(path)
    with db:
        for i in rng.sample(range(1, 200001), 4000):
            db.execute("UPDATE accounts SET balance = ?, bio = ? WHERE id = ?",
                       (rng.random() * 1e4, text(rng, rng.randint(5, 25)), i))
        for i in rng.sample(range(1, 300001), 6000):
            db.execute("UPDATE messages SET body = ? WHERE id = ?", (text(rng, rng.randint(10, 60)), i))
        db.executemany("INSERT INTO messages VALUES (?, ?, ?, ?, ?)",
                       ((i, rng.randint(1, 200000), 1600000000 + i * 11, text(rng, 6), text(rng, rng.randint(10, 60)))
                        for i in range(300001, 304001)))
        db.executemany("INSERT INTO attachments VALUES (?, ?, ?, ?)",
                       ((i, rng.randint(300001, 304000), f"file{i}.bin", rng.randbytes(rng.randint(512, 4096)))
                        for i in range(15001, 15301)))
        gone = rng.sample(range(1, 300001), 3000)
        db.executemany("DELETE FROM attachments WHERE message = ?", ((i,) for i in gone))
        db.executemany("DELETE FROM messages WHERE id = ?", ((i,) for i in gone))
    db.close()


def sqlite_pair():
    """CACHE/sqlite/old.db (sqlite_fill) and new.db (a copy of it after sqlite_update)."""
    d = os.path.join(CACHE, "sqlite")
    old, new = d + "/old.db", d + "/new.db"
    if built(old, new):
        return old, new
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    print("  building the SQLite database...", file=sys.stderr)
    sqlite_fill(d + "/old.tmp")
    shutil.copyfile(d + "/old.tmp", d + "/new.tmp")
    sqlite_update(d + "/new.tmp")
    os.rename(d + "/new.tmp", new)
    os.rename(d + "/old.tmp", old)
    return old, new


def library_pair():
    """CACHE/library/old.so and new.so: the largest shared library (libarrow.so.*) of WHEEL's two
    releases, from PyPI's manylinux2014 x86_64 wheels for CPython 3.11. Returns (old, new, its name)."""
    d = os.path.join(CACHE, "library")
    old, new = d + "/old.so", d + "/new.so"
    package, v_old, v_new = WHEEL
    if built(old, new, d + "/name"):
        return old, new, open(d + "/name").read().strip()
    os.makedirs(d, exist_ok=True)
    name = ""
    for version, out in ((v_old, old), (v_new, new)):
        wheels = os.path.join(d, "wheels-" + version)
        sh([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--platform",
            "manylinux2014_x86_64", "--python-version", "3.11", f"{package}=={version}", "-d", wheels])
        wheel = next(os.path.join(wheels, w) for w in os.listdir(wheels) if w.endswith(".whl"))
        with zipfile.ZipFile(wheel) as z:
            members = [m for m in z.infolist() if os.path.basename(m.filename).startswith("libarrow.so.")]
            member = max(members, key=lambda m: m.file_size)
            name = os.path.basename(member.filename)
            with z.open(member) as src, open(out + ".tmp", "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        os.rename(out + ".tmp", out)
        shutil.rmtree(wheels)
    open(d + "/name", "w").write(name + "\n")
    return old, new, name


def realdata_sets():
    """Every set, built when missing: [(label, file name served, old path, new path, how it was made)]."""
    print(f"== realdata: the data sets in {CACHE}", file=sys.stderr)
    old_root, new_root = debian_roots()
    tars = debian_tars(old_root, new_root)
    images = debian_images(old_root, new_root)
    dbs = sqlite_pair()
    lib_old, lib_new, lib_name = library_pair()
    installed = ", ".join(PACKAGES)
    package, v_old, v_new = WHEEL
    return [
        ("Debian root, tar", "root.tar", *tars,
         "`debootstrap --variant=minbase bookworm` (old), a copy of that root with " + installed + " installed by "
         "apt in a chroot (new), each then cleaned as an image build does (`apt-get clean`, apt's lists removed), "
         "as `tar --sort=name --numeric-owner`"),
        ("Debian root, ext4 image", "root.img", *images,
         "the same two roots as ext4 images (`mkfs.ext4 -d`, 4 KiB blocks, fixed UUID, hash seed and time, one size "
         "for both), checked with `e2fsck -fn`"),
        ("SQLite database", "app.db", *dbs,
         "Python's sqlite3, fixed seed: 200,000 accounts, 300,000 messages, 15,000 blob attachments, 3 indexes "
         "(old); a copy after a batch of updates: 2% of accounts and of messages updated at scattered rows, 4,000 "
         "messages and 300 attachments inserted, 3,000 messages deleted, no VACUUM (new)"),
        ("native library", lib_name, lib_old, lib_new,
         f"`{lib_name}` from PyPI's {package} {v_old} and {v_new} wheels (manylinux2014 x86_64, CPython 3.11)"),
    ]


if __name__ == "__main__":
    for label, name, old, new, how in realdata_sets():
        print(f"{label}: {name} {os.path.getsize(old):,} → {os.path.getsize(new):,} B")
