"""Makes N signed status reports as N machines would publish them (each its own Ed25519 key, the
body as ferry writes it) and puts them in an S3 bucket: the data of the `ferry fleet` figure.
Run with the project's .venv python (cryptography and boto3 come with moto). Some are spoiled on
purpose: `--forged` have a body that no longer matches the signature, `--malformed` are not reports.
Prints the counts as JSON."""
import argparse
import base64
import concurrent.futures
import json
import random
import time

import boto3
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat


def report(i, now, rng):
    """Machine i's report: its object name and bytes."""
    key = Ed25519PrivateKey.generate()
    raw = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    served = 8 if rng.random() < 0.6 else 7
    inside = served == 8 or rng.random() < 0.1
    fields = [('"ferry-report"', "1"), ('"machine"', json.dumps(f"{i:032x}")), ('"host"', json.dumps(f"node-{i:05d}")),
              ('"key"', json.dumps("ed25519:" + base64.b64encode(raw).decode())), ('"session"', '"assets"'),
              ('"seq"', str(rng.randint(1, 500))),
              ('"time"', json.dumps(time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now - rng.randint(0, 5400))))),
              ('"served"', str(served)), ('"tree"', json.dumps(f"{served:024x}")), ('"seen"', "8"),
              ('"rollout"', json.dumps(f"8 60 {'in' if inside else 'out'} {8 if inside else 7}"))]
    rejected = served == 7 and inside
    fields.append(('"health"', '"failed"' if rejected else '"passed"'))
    if rejected:
        fields.append(('"rejected"', "8"))
    error = rng.random() < 0.02
    fields.append(('"exit"', "4" if error else "0"))
    if error:
        fields.append(('"error"', '"remote-or-manifest"'))
    fields += [('"origin"', str(rng.randint(0, 10 ** 6))), ('"mirrors"', str(rng.randint(0, 10 ** 8)))]
    body = ("{" + ",".join(f"{k}:{v}" for k, v in fields) + "}").encode()
    signature = base64.b64encode(key.sign(body))
    return f"{raw[:16].hex()}.assets.report", body + b"\n" + signature + b"\n"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--endpoint", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--secret", required=True)
    p.add_argument("--bucket", required=True)
    p.add_argument("--prefix", default="fleet/")
    p.add_argument("--count", type=int, default=10000)
    p.add_argument("--forged", type=int, default=0)
    p.add_argument("--malformed", type=int, default=0)
    a = p.parse_args()
    rng = random.Random(58)
    now = int(time.time())
    objects = [report(i, now, rng) for i in range(a.count)]
    for k in range(a.forged):
        name, data = objects[k]
        objects[k] = (name, data.replace(b'"seen":8', b'"seen":9', 1))
    objects += [(f"junk-{k}.report", b"not a report\n") for k in range(a.malformed)]
    s3 = boto3.client("s3", endpoint_url=a.endpoint, aws_access_key_id=a.key, aws_secret_access_key=a.secret,
                      region_name="us-east-1")
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda o: s3.put_object(Bucket=a.bucket, Key=a.prefix + o[0], Body=o[1]), objects))
    print(json.dumps({"reports": a.count, "forged": a.forged, "malformed": a.malformed,
                      "bytes": sum(len(d) for _, d in objects)}))


if __name__ == "__main__":
    main()
