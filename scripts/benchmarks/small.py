"""Many small files: 10,000 × 4 KiB over HTTP and over HTTPS with HTTP/2, and a real tree (this
machine's documentation, locales and Python library) mirrored cold onto disk."""
import os
import shutil
import subprocess

from .runners import BASE, curl_list, ferry_config, fresh, make_small, measure, per_file_cpu, private_ca
from .servers import Nginx

REAL_TREE_SOURCES = ["/usr/share/doc", "/usr/share/locale", "/usr/lib/python3.11"]


def small_only(ferry, runs):
    """--only small: the 10,000-file rows over HTTP and HTTPS, and the real tree on disk."""
    www = fresh(BASE + "/www")
    small = make_small(www)
    subprocess.run([ferry, "manifest", "build", small, "--quiet"], check=True)
    return small_file_sections(ferry, runs, www, BASE + "/out") + [real_tree_section(ferry, runs)]


def publish_objects(ferry, small, www):
    """The 10,000 files pushed with remote-layout = objects into `www`/objects/ (packs and all)."""
    root = fresh(www + "/objects")
    cfg = BASE + "/ferry-push-objects.conf"
    open(cfg, "w").write(f"[agent]\nstate = {fresh(BASE + '/push-objects-state')}\n\n[session up]\ndirection = push\n"
                         f"remote = file://{root}/\nlocal = {small}\nremote-layout = objects\n")
    subprocess.run([ferry, "sync", "now", "--config", cfg, "--quiet"], check=True)


def small_file_sections(ferry, runs, www, out):
    """10,000 × 4 KiB files (`www`/small, with its manifest) over HTTP and over HTTPS with HTTP/2,
    ferry beside curl --parallel, rclone, aria2c and wget, each into a fresh `out`."""
    nginx = Nginx(www)
    url = nginx.url
    sections = []
    # ---- 10,000 × 4 KiB
    curl_cfg = curl_list(BASE + "/curl-small.cfg", url, out)
    aria_list = BASE + "/aria2-small.txt"
    with open(aria_list, "w") as f:
        for d in range(100):
            for i in range(100):
                f.write(f"{url}small/d{d:02}/f{i:03}.bin\n  out=d{d:02}/f{i:03}.bin\n")
    scfg = BASE + "/ferry-small.conf"
    # The same tree listed by a flat format-1 manifest (one GET, where format 2's root names
    # 1,206 objects fetched before the first file): what a cold format-2 mirror pays for its tree.
    # Kept under .ferry/, which the format-2 manifest does not list and the peers are told to skip
    # (rclone --exclude, wget -X): they copy the 10,000 files and nothing else.
    subprocess.run([ferry, "manifest", "build", www + "/small", "--format", "1", "--output",
                    www + "/small/.ferry/flat.json", "--exclude", "manifest.json", "--quiet"], check=True)
    fcfg = BASE + "/ferry-small-flat.conf"
    # The same files pushed with remote-layout = objects: a cold mirror of it reads packs.
    publish_objects(ferry, www + "/small", www)
    ocfg = BASE + "/ferry-small-objects.conf"
    ferry_row, curl_row, rclone_row = parallel_peers(ferry, scfg, curl_cfg, url, out, 16)
    tools = [
        ferry_row,
        ("ferry sync now (16, format 1)",
         lambda: (fresh(out), ferry_config(fcfg, url + "small/", out + "/ferry", out + "/ferry-state", 16,
                                           "manifest = .ferry/flat.json\n")),
         lambda: [ferry, "sync", "now", "--config", fcfg, "--quiet"]),
        ("ferry sync now (16, objects layout, packs)",
         lambda: (fresh(out), ferry_config(ocfg, url + "objects/", out + "/ferry", out + "/ferry-state", 16)),
         lambda: [ferry, "sync", "now", "--config", ocfg, "--quiet"]),
        curl_row,
        rclone_row,
        ("aria2c -j16", lambda: fresh(out),
         lambda: ["aria2c", "-q", "-j16", "--file-allocation=none", "-d", out + "/aria2", "-i", aria_list]),
        ("wget -r", lambda: fresh(out),
         lambda: ["wget", "-q", "-r", "-np", "-nH", "--cut-dirs=1", "-X", "/small/.ferry", "-P", out + "/wget",
                  url + "small/"]),
    ]
    table = measure("10,000 × 4 KiB", tools, runs, server=nginx)
    sections.append(("10,000 × 4 KiB files", table, "curl --parallel (16)", 1.0,
                     "wall ≤ 1.0 × curl --parallel --parallel-max 16; ferry's CPU ≤ 0.5 s",
                     per_file_cpu(table, 10000) + " The format-1 row reads the same tree from one flat manifest: the "
                     "difference to the first row is what fetching and checking format 2's metadata objects costs a "
                     "cold mirror. The objects-layout row reads the same files pushed with remote-layout = objects, "
                     "from its packs (target ≤ 0.5 × curl, issue 56)."))

    nginx.stop()
    sections.append(small_files_over_https(ferry, runs, www, out, curl_cfg, url))
    return sections


def parallel_peers(ferry, cfg, curl_cfg, url, out, n):
    """The 10,000 files at `url`small/ into a fresh `out`, `n` at a time: ferry (its config written
    at `cfg`), curl --parallel (its list at `curl_cfg`) and rclone copy, as measure() rows."""
    return [
        (f"ferry sync now ({n})",
         lambda: (fresh(out), ferry_config(cfg, url + "small/", out + "/ferry", out + "/ferry-state", n)),
         lambda: [ferry, "sync", "now", "--config", cfg, "--quiet"]),
        (f"curl --parallel ({n})", lambda: fresh(out),
         lambda: ["curl", "-sf", "--parallel", "--parallel-max", str(n), "--create-dirs", "-K", curl_cfg]),
        (f"rclone copy --transfers {n}", lambda: fresh(out),
         lambda: ["rclone", "--config", "/dev/null", "copy", ":http:", out + "/rclone", "--http-url", url + "small/",
                  "--transfers", str(n), "--exclude", "manifest.json", "--exclude", ".ferry/**"]),
    ]


def small_files_over_https(ferry, runs, www, out, curl_cfg, url):
    """10,000 × 4 KiB over HTTPS with HTTP/2 and a private CA (curl's list: `curl_cfg`, `url` replaced)."""
    ca, cert, key = private_ca(BASE + "/tls")
    tls = Nginx(www, tls=(cert, key))
    turl = tls.url
    tls_curl_cfg = BASE + "/curl-small-tls.cfg"
    open(tls_curl_cfg, "w").write(open(curl_cfg).read().replace(url, turl))
    tcfg = BASE + "/ferry-small-tls.conf"
    tools = [
        ("ferry sync now (16)",
         lambda: (fresh(out), ferry_config(tcfg, turl + "small/", out + "/ferry", out + "/ferry-state", 16,
                                           f"ca-file = {ca}\n")),
         lambda: [ferry, "sync", "now", "--config", tcfg, "--quiet"]),
        ("ferry sync now (16, format 1)",
         lambda: (fresh(out), ferry_config(tcfg, turl + "small/", out + "/ferry", out + "/ferry-state", 16,
                                           f"ca-file = {ca}\nmanifest = .ferry/flat.json\n")),
         lambda: [ferry, "sync", "now", "--config", tcfg, "--quiet"]),
        ("curl --parallel --http2 (16)", lambda: fresh(out),
         lambda: ["curl", "-sf", "--http2", "--cacert", ca, "--parallel", "--parallel-max", "16", "--create-dirs",
                  "-K", tls_curl_cfg]),
        ("rclone copy --transfers 16", lambda: fresh(out),
         lambda: ["rclone", "--config", "/dev/null", "copy", ":http:", out + "/rclone", "--ca-cert", ca,
                  "--http-url", turl + "small/", "--transfers", "16", "--exclude", "manifest.json",
                  "--exclude", ".ferry/**"]),
    ]
    table = measure("10,000 × 4 KiB over HTTPS", tools, runs, server=tls)
    section = ("10,000 × 4 KiB files over HTTPS (HTTP/2, private CA)", table,
               "curl --parallel --http2 (16)", 1.2, "wall ≤ 1.2 × curl --parallel --http2",
               per_file_cpu(table, 10000) + " The format-1 row reads the same tree from one flat manifest, as over "
               "HTTP. All 10,000 files share one HTTP/2 connection, so every byte's decryption is on one thread of "
               "the client's.")
    tls.stop()
    return section


def real_tree_section(ferry, runs):
    """A tree nobody here wrote (this machine's documentation, locales and Python library: small
    and mid-sized files, symlinks, odd names), served by nginx from tmpfs and mirrored cold into a
    directory on the machine's disk (ext4 under /var/tmp), where every fsync reaches the device."""
    www = fresh(BASE + "/www-real")
    tree = www + "/real"
    os.makedirs(tree)
    for source in REAL_TREE_SOURCES:
        if os.path.isdir(source):
            subprocess.run(["cp", "-a", source, tree + "/" + source.strip("/").replace("/", "_")], check=True)
    # Links whose target is not in the copy would be errors for a tool that lists the server's pages.
    subprocess.run(["find", tree, "-xtype", "l", "-delete"], check=True)
    files = int(subprocess.run(["sh", "-c", f"find {tree} -type f | wc -l"], capture_output=True, text=True).stdout)
    mib = int(subprocess.run(["du", "-sm", tree], capture_output=True, text=True).stdout.split()[0])
    subprocess.run([ferry, "manifest", "build", tree, "--quiet"], check=True)
    disk = "/var/tmp/ferry-bench-disk"
    out = disk + "/out"
    nginx = Nginx(www)
    cfg = BASE + "/ferry-real.conf"

    def clean():
        """A fresh output directory, and the last run's writeback done."""
        fresh(out)
        subprocess.run(["sync"], check=True)  # the last run's writeback is not this run's cost

    tools = [
        ("ferry sync now (16)",
         lambda: (clean(), ferry_config(cfg, nginx.url + "real/", out + "/ferry", out + "/ferry-state", 16)),
         lambda: [ferry, "sync", "now", "--config", cfg, "--quiet"]),
        ("rclone copy --transfers 16", clean,
         lambda: ["rclone", "--config", "/dev/null", "copy", ":http:", out + "/rclone", "--http-url",
                  nginx.url + "real/", "--transfers", "16", "--exclude", "manifest.json", "--exclude", ".ferry/**"]),
        ("cp -a, then sync (floor)", clean, lambda: ["sh", "-c", f"cp -a {tree} {out}/cp && sync"]),
    ]
    table = measure(f"real tree, {files:,} files, {mib} MiB, cold on disk", tools, runs)
    nginx.stop()
    shutil.rmtree(www, ignore_errors=True)
    shutil.rmtree(disk, ignore_errors=True)
    note = (f"The tree: {', '.join(REAL_TREE_SOURCES)} as this machine has them ({files:,} files, {mib} MiB on "
            "tmpfs, symlinks kept; rclone fetches what a link points to, as the server sends it, and verifies "
            "nothing). Output on ext4 (`/var/tmp`). ferry syncs the data of each group of up to 256 verified files at "
            "once (one syncfs), then renames them into place; that writeback is ferry's own system time, where rclone "
            "leaves its dirty pages to the kernel (each round here begins with a `sync`, untimed, so no tool pays for "
            "another's). "
            "With an fsync per file (before grouping) ferry took 9.29 s here, 1.54 × rclone.")
    return ("real tree, cold, on disk", table, "rclone copy --transfers 16", 1.2,
            "wall ≤ 1.2 × rclone copy --transfers 16", note)
