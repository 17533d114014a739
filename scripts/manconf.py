#!/usr/bin/env python3
"""Writes ferry.conf(5) from config/ferry.conf, the one place every key is documented.

usage: scripts/manconf.py config/ferry.conf VERSION DATE > ferry.conf.5

The file's layout is the page's: the comment before the first section is the description, each
section a section, each key line (`key = value`, or `# key = value` for a key shown unset) an
entry whose text is the comment above it; keys that share one comment share one entry.
"""
import re
import sys

KEY = re.compile(r'^(?:# )?([a-z0-9][a-z0-9-]*) = (.*)$')


# Whole configs for what operators do most; each key is described above.
EXAMPLES = [
    ('A mirror of a tree published over HTTPS, polled every 15 minutes by the agent:', '''[agent]
state = /var/lib/ferry

[session assets]
remote = https://mirror.example.net/assets/
local = /srv/assets
poll = 15m
delete = yes
max-delete = 10%'''),
    ('A mirror that accepts only manifests signed by the publisher\'s key, and switches whole versions:', '''[session site]
remote = https://origin.example.net/site/
local = /srv/www/site
trusted-keys = ed25519:PUBLIC
layout = generations
keep-generations = 3'''),
    ('A push to S3 (credentials from the AWS chain) and a pull of it on another machine:', '''[session publish]
direction = push
remote = s3://assets-bucket/site/
local = /srv/publish
sign-key = /etc/ferry/sign.pem

[session mirror]
remote = s3://assets-bucket/site/
local = /srv/site
s3-region = eu-west-1'''),
    ('A push to WebDAV, and an agent serving metrics on loopback:', '''[agent]
metrics-listen = 127.0.0.1:9469

[session upload]
direction = push
remote = https://dav.example.net/site/
local = /srv/publish
basic-auth-file = /etc/ferry/dav.basic'''),
    ('A mirror that fetches only at night, on AC power, at most 2 MB/s:', '''[session nightly]
remote = https://mirror.example.net/big/
local = /srv/big
discretionary = yes
window = 22:00-06:00
require-ac-power = yes
bwlimit = 2M'''),
]


def escape(text):
    text = text.replace('\\', '\\e').replace('-', '\\-')
    if text.startswith('.') or text.startswith("'"):
        text = '\\&' + text
    return text


def paragraph(lines):
    """Comment lines as man text: lines indented past `# ` are kept as laid out."""
    out, block = [], False
    for line in lines:
        if line == '':
            if block:
                out.append('.fi')
                block = False
            out.append('.PP')
            continue
        laid_out = line.startswith('  ')
        if laid_out and not block:
            out.append('.nf')
            block = True
        if not laid_out and block:
            out.append('.fi')
            block = False
        out.append(escape(line))
    if block:
        out.append('.fi')
    return out


def main():
    path, version, date = sys.argv[1], sys.argv[2], sys.argv[3]
    lines = open(path, encoding='utf-8').read().split('\n')
    out = ['.TH FERRY.CONF 5 "%s" "ferry %s" "File Formats"' % (date, version),
           '.SH NAME', 'ferry.conf \\- configuration of the ferry sync agent',
           '.SH SYNOPSIS', '.I /etc/ferry/ferry.conf',
           '.SH DESCRIPTION']
    comment, keys, seen = [], [], []
    started = False

    def flush_entry():
        nonlocal comment, keys
        if keys:
            out.append('.TP')
            out.append('.B ' + escape(keys[0]))
            for k in keys[1:]:
                out.append('.TQ')
                out.append('.B ' + escape(k))
            out.extend(paragraph(comment))
            comment, keys = [], []

    for raw in lines:
        line = raw.rstrip()
        if line.startswith('['):
            flush_entry()
            if not started:
                out.extend(paragraph(comment))
                started = True
            elif comment:
                out.extend(['.SH "SESSIONS"'] if line.startswith('[session') else [])
                out.extend(paragraph(comment))
            name = '[session NAME]' if line.startswith('[session') else line
            out.append('.SH "%s"' % escape(name))
            comment = []
            continue
        m = KEY.match(line)
        if m and started:
            # Keys right under one comment share its entry (a comment after a key flushed it).
            keys.append('%s = %s' % (m.group(1), m.group(2)))
            seen.append(m.group(1))
            continue
        if line.startswith('#'):
            if keys:
                flush_entry()
            text = line[1:]
            comment.append(text[1:] if text.startswith(' ') else text)
        elif line == '':
            if keys:
                flush_entry()
    flush_entry()
    out.append('.SH EXAMPLES')
    for title, example in EXAMPLES:
        out += ['.PP', escape(title), '.PP', '.RS 4', '.EX'] + [escape(l) for l in example.split('\n')] + ['.EE', '.RE']
    out += ['.SH FILES', '.TP', '.I /etc/ferry/ferry.conf',
            'the config ferry reads when neither \\-\\-config nor $FERRY_CONFIG names one',
            '.SH SEE ALSO', '.BR ferry (1)']
    sys.stdout.write('\n'.join(out) + '\n')


if __name__ == '__main__':
    main()
