import Foundation
import Testing
@testable import FerryRuntime
import FerryCore

/// S3 remotes (issue 19): signing, credentials and configuration, and pulls from a real
/// distributed object store (SeaweedFS on 127.0.0.1).
struct S3Tests {
    // MARK: Signing

    /// The four worked examples of AWS's SigV4 documentation for S3 (GET with a range, PUT with
    /// a payload hash and a key that needs encoding, a subresource without a value, a query to
    /// sort), signed by ferry's signer.
    @Test func signsAsAWSDocumentsIt() throws {
        let signer = SigV4(credentials: S3CredentialProvider(fixed: S3Credentials(accessKey: "AKIAIOSFODNN7EXAMPLE",
                                                                                  secretKey: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", sessionToken: nil),
                                                             source: "test"), region: "us-east-1")
        let time = try #require(Timestamp(rfc3339: "2013-05-24T00:00:00Z"))
        let host = "examplebucket.s3.amazonaws.com"
        func signature(_ request: SigV4.Request) -> String? {
            let authorization = (try? signer.headers(for: request, at: time))?.first { $0.hasPrefix("Authorization: ") }
            return authorization?.components(separatedBy: "Signature=").last
        }
        #expect(signature(SigV4.Request(method: "GET", host: host, path: "/" + "test.txt".percentEncoded(keepingSlashes: true),
                                        headers: [("Range", "bytes=0-9")], payloadHash: SigV4.emptyPayload))
                == "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41")
        let body = "Welcome to Amazon S3."
        #expect(SigV4.sha256Hex(Array(body.utf8)) == "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072")
        #expect(signature(SigV4.Request(method: "PUT", host: host, path: "/" + "test$file.text".percentEncoded(keepingSlashes: true),
                                        headers: [("Date", "Fri, 24 May 2013 00:00:00 GMT"), ("x-amz-storage-class", "REDUCED_REDUNDANCY")],
                                        payloadHash: SigV4.sha256Hex(Array(body.utf8))))
                == "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd")
        #expect(signature(SigV4.Request(method: "GET", host: host, path: "/", query: [("lifecycle", "")], payloadHash: SigV4.emptyPayload))
                == "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543")
        #expect(signature(SigV4.Request(method: "GET", host: host, path: "/", query: [("prefix", "J"), ("max-keys", "2")], payloadHash: SigV4.emptyPayload))
                == "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7")
        // A session token is signed and sent.
        let temporary = SigV4(credentials: S3CredentialProvider(fixed: S3Credentials(accessKey: "A", secretKey: "s", sessionToken: "TOKEN/+="), source: "test"),
                              region: "eu-west-1")
        let headers = try temporary.headers(for: SigV4.Request(method: "GET", host: host, path: "/", payloadHash: SigV4.emptyPayload), at: time)
        #expect(headers.contains("x-amz-security-token: TOKEN/+="))
        #expect(headers.contains { $0.contains("SignedHeaders=host;x-amz-content-sha256;x-amz-date;x-amz-security-token") })
    }

    @Test func encodesKeysByTheCanonicalRules() {
        #expect("a b+c%d#e?f~g/ü.txt".percentEncoded(keepingSlashes: true) == "a%20b%2Bc%25d%23e%3Ff~g/%C3%BC.txt")
        #expect("x/y".percentEncoded(keepingSlashes: false) == "x%2Fy")
    }

    // MARK: Credentials and configuration

    @Test func readsSharedCredentialsFiles() throws {
        let text = """
            # a comment
            [default]
            aws_access_key_id = AKDEFAULT
            aws_secret_access_key = secret/default

            [profile deploy]
            aws_access_key_id=AKDEPLOY
            aws_secret_access_key=s2
            aws_session_token = tok
            """
        let fallback = try S3Credentials.parse(text, profile: "default")
        #expect(fallback.accessKey == "AKDEFAULT" && fallback.secretKey == "secret/default" && fallback.sessionToken == nil)
        let deploy = try S3Credentials.parse(text, profile: "deploy")
        #expect(deploy.accessKey == "AKDEPLOY" && deploy.secretKey == "s2" && deploy.sessionToken == "tok")
        #expect("\(deploy)" == "access key AKDEPLOY", "the secret is never part of its description")
        let missing = #expect(throws: ConfigProblem.self) { try S3Credentials.parse(text, profile: "other") }
        #expect(missing?.message == "has no [other] profile")
        let noSecret = #expect(throws: ConfigProblem.self) { try S3Credentials.parse("[default]\naws_access_key_id = A\n", profile: "default") }
        #expect(noSecret?.message.contains("aws_secret_access_key") == true)

        // Without a file, the AWS chain (AWSCredentialsTests); without any source, one error naming them all.
        let box = Sandbox("s3-credentials")
        box.configure(remote: "s3://bucket/prefix/", session: ["s3-endpoint = http://127.0.0.1:1"])
        let session = try ConfigLoader.load(path: box.config).sessions[0]
        let env = try S3CredentialChain.resolve(session) { ["AWS_ACCESS_KEY_ID": "AKENV", "AWS_SECRET_ACCESS_KEY": "sek", "AWS_SESSION_TOKEN": "t"][$0] }
        let fromEnv = try env.provider.current(now: SystemClock().now())
        #expect(fromEnv.accessKey == "AKENV" && fromEnv.sessionToken == "t" && env.provider.source == "environment")
        let none = #expect(throws: FerryError.self) {
            try S3CredentialChain.resolve(session) { ["HOME": box.directory, "AWS_EC2_METADATA_DISABLED": "true"][$0] }
        }
        #expect(none?.category == .usage && none?.hint?.contains("s3-credentials") == true)

        // A credentials file others can read is warned about; `config check` finds a missing one.
        let readable = box.directory + "/aws-credentials"
        try text.writeReplacing(readable, mode: 0o644)
        box.configure(remote: "s3://bucket/prefix/", session: ["s3-endpoint = http://127.0.0.1:1", "s3-credentials = \(readable)"])
        #expect(ferry(["config", "check", "--config", box.config]).stderr.contains("is readable by every user; run: chmod 600 \(readable)"))
        box.configure(remote: "s3://bucket/prefix/", session: ["s3-endpoint = http://127.0.0.1:1", "s3-credentials = \(readable).gone"])
        let check = ferry(["config", "check", "--config", box.config])
        #expect(check.exitCode == 2 && check.stderr.contains("s3-credentials = \(readable).gone"), "\(check.output)")
    }

    @Test func s3KeysAreCheckedWhereTheyAreRead() throws {
        func parse(_ remote: String, _ lines: [String]) -> Result<SessionConfig, FerryError> {
            let text = (["[session s]", "remote = \(remote)", "local = /srv/x"] + lines).joined(separator: "\n") + "\n"
            do { return .success(try ConfigParser.parse(text, path: "/etc/ferry/ferry.conf").sessions[0]) } catch { return .failure(error) }
        }
        let ok = try parse("s3://media-bucket/site/v1", ["s3-endpoint = http://10.0.0.5:8333/", "s3-region = eu-central-1",
                                                         "s3-credentials = creds", "s3-profile = deploy", "upload-part-size = 8M"]).get()
        #expect(ok.remote.bucket == "media-bucket" && ok.remote.keyPrefix == "site/v1/")
        #expect(ok.s3.endpoint == "http://10.0.0.5:8333" && ok.s3.region == "eu-central-1" && ok.s3.usesPathStyle)
        #expect(ok.s3.credentials == "/etc/ferry/creds" && ok.s3.profile == "deploy" && ok.uploadPartSize == 8 << 20)
        let aws = try parse("s3://bucket/", []).get()
        #expect(aws.s3.effectiveEndpoint(region: "us-east-1") == "https://s3.us-east-1.amazonaws.com" && aws.s3.region == nil && !aws.s3.usesPathStyle && aws.remote.keyPrefix == "")
        #expect(try parse("s3://my.dotted.bucket/", []).get().s3.usesPathStyle, "virtual-hosted TLS fails for dotted buckets")

        func refusal(_ remote: String, _ lines: [String]) -> String {
            guard case let .failure(error) = parse(remote, lines) else { return "accepted" }
            return error.message
        }
        #expect(refusal("https://example.net/", ["s3-region = us-east-1"]).contains("applies only to an s3:// remote"))
        #expect(refusal("s3://ab/", []).contains("is not an S3 bucket name"))
        #expect(refusal("s3://bucket/", ["upload-part-size = 1M"]).contains("5M to 5G"))
        #expect(refusal("s3://bucket/", ["s3-endpoint = http://h:1/path"]).contains("without a path"))
        #expect(refusal("s3://bucket/", ["s3-endpoint = ftp://h"]).contains("http://"))
        #expect(refusal("s3://bucket/", ["basic-auth-file = /x"]).contains("s3-credentials"))
        #expect(refusal("s3://bucket/", ["manifest = https://elsewhere/m.json"]).contains("under its prefix"))
        // What stands before an @ may be a secret: refused, never quoted.
        for (remote, lines) in [("s3://bucket/", ["s3-endpoint = http://AKIA:s3cr3t@10.0.0.5:8333"]), ("s3://AKIA:s3cr3t@bucket/", [])] {
            let message = refusal(remote, lines)
            #expect(message.contains("carries no credentials") && !message.contains("s3cr3t"), "\(message)")
        }
        #expect(refusal("s3://bucket/", ["s3-endpoint = http://h:1#x"]).contains("not a host and port"))
        #expect(try parse("s3://bucket/", ["s3-endpoint = HTTP://[::1]:8333/"]).get().s3.endpoint == "http://[::1]:8333")
        // Each key is checked in the order of the lines: the first bad one is named.
        #expect(refusal("s3://bucket/", ["s3-region = not/a/region", "poll = soon"]).contains("key 's3-region'"))
    }

    // MARK: Pull from SeaweedFS

    /// A tree whose keys need every kind of encoding mirrors exactly; the next run transfers
    /// nothing.
    @Test func pullsATreeWhoseKeysNeedEncoding() throws {
        let store = try SeaweedFS.shared()
        let bucket = try store.newBucket("pull")
        let box = Sandbox("s3-pull")
        let names = ["a b.txt", "plus+sign.txt", "percent%41.txt", "hash#1.txt", "question?.txt", "tilde~.txt", "ünï/çødé.txt",
                     "deep/er/big.bin", "semi;colon=eq&amp.txt"]
        for (i, name) in names.enumerated() {
            box.publish(name, name.hasSuffix(".bin") ? randomData(3_000_000, seed: 9) : Data("file \(i) \(name)\n".utf8))
        }
        box.buildManifest()
        try store.putTree(box.published, bucket: bucket, prefix: "site/")
        box.configure(remote: "s3://\(bucket)/site/", session: ["s3-endpoint = \(store.endpoint)", "s3-credentials = \(try store.credentialsFile(in: box.directory))"])
        let run = box.sync()
        #expect(run.exitCode == 0, "\(run.output)")
        expectIdentical(box.published, box.local)
        #expect(!run.output.contains(SeaweedFS.secretKey))
        let again = box.sync(["--json"])
        #expect(again.exitCode == 0, "\(again.output)")
        #expect(again.events(named: "task-done").isEmpty, "nothing is fetched again: \(again.stdout)")
    }

    /// Each failure names its cause and the setting to fix, once, with exit 4 for the remote (2
    /// for missing credentials), and never shows the secret.
    @Test func errorsNameTheCauseAndTheKeyToFix() throws {
        let store = try SeaweedFS.shared()
        let bucket = try store.newBucket("errors")
        try store.put(bucket, "manifest.json", data: Data(#"{"format":"ferry-manifest/1","version":1,"files":[]}"#.utf8))
        let box = Sandbox("s3-errors")
        let wrongSecret = box.directory + "/wrong"
        try "[default]\naws_access_key_id = \(SeaweedFS.accessKey)\naws_secret_access_key = not-the-secret\n".writeReplacing(wrongSecret, mode: 0o600)
        let unknownKey = box.directory + "/unknown"
        try "[default]\naws_access_key_id = AKNOBODY\naws_secret_access_key = whatever-secret\n".writeReplacing(unknownKey, mode: 0o600)
        func run(_ remote: String, _ credentials: String) -> FerryRun {
            box.configure(remote: remote, session: ["s3-endpoint = \(store.endpoint)", "s3-credentials = \(credentials)"])
            return box.sync()
        }
        let cases: [(String, String, Int32, [String])] = [
            ("s3://\(bucket)/", wrongSecret, 4, ["SignatureDoesNotMatch", "check the secret access key of the credentials from s3-credentials \(wrongSecret) [default]"]),
            ("s3://\(bucket)/", unknownKey, 4, ["InvalidAccessKeyId", "check the access key id of the credentials from s3-credentials \(unknownKey) [default]"]),
            ("s3://no-such-bucket-here/", try store.credentialsFile(in: box.directory), 4, ["NoSuchBucket", "remote = s3://"]),
            ("s3://\(bucket)/", box.directory + "/absent", 2, ["s3-credentials", "create the file"]),
        ]
        for (remote, credentials, code, words) in cases {
            let result = run(remote, credentials)
            #expect(result.exitCode == code, "\(remote): \(result.output)")
            for word in words { #expect(result.stderr.contains(word), "\(word) in: \(result.stderr)") }
            #expect(result.stderr.components(separatedBy: "error:").count == 2, "one error: \(result.stderr)")
            for secret in ["not-the-secret", "whatever-secret", SeaweedFS.secretKey] { #expect(!result.output.contains(secret)) }
        }
    }

    /// Errors a store gives that SeaweedFS cannot be made to give on cue, from our fault-injecting
    /// server standing in for the store (it answers path-style requests from a directory and checks
    /// no signature): a clock skew and a wrong region refuse the run with the setting to fix (exit
    /// 4); `SlowDown` (503) is waited out and retried; an `AccessDenied` on one key fails that file
    /// alone, named, while the rest mirror.
    @Test func storeErrorsAreExplainedRetriedOrFailAlone() throws {
        let box = Sandbox("s3-faults")
        let root = box.directory + "/store"
        let tree = box.directory + "/tree"
        try FileManager.default.createDirectory(atPath: tree, withIntermediateDirectories: true)
        try "a\n".writeReplacing(tree + "/a.txt")
        try "b\n".writeReplacing(tree + "/b.txt")
        #expect(ferry(["manifest", "build", tree]).exitCode == 0)
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: tree, toPath: root + "/bkt")
        let server = try PythonServer(directory: root)
        defer { server.stop() }
        let credentials = box.directory + "/aws"
        try "[default]\naws_access_key_id = AK\naws_secret_access_key = sk\n".writeReplacing(credentials, mode: 0o600)
        box.configure(remote: "s3://bkt/", session: ["s3-endpoint = http://127.0.0.1:\(server.port)", "s3-credentials = \(credentials)",
                                                      "retry-delay = 0.2", "retries = 3"])
        func error(_ code: String, _ extra: String = "") -> String {
            "<?xml version=\"1.0\"?><Error><Code>\(code)</Code><Message>from the store</Message>\(extra)</Error>"
        }
        let refusals: [(Int, String, [String])] = [
            (403, error("RequestTimeTooSkewed"), ["clock", "timedatectl"]),
            (400, error("AuthorizationHeaderMalformed", "<Region>eu-west-1</Region>"), ["not in region us-east-1", "s3-region = eu-west-1"]),
        ]
        for (status, body, words) in refusals {
            server.setFaults(["/bkt/manifest.json": ["statuses": [status, status, status, status, status], "body": body]])
            let run = box.sync()
            #expect(run.exitCode == 4, "\(run.output)")
            for word in words { #expect(run.stderr.contains(word), "\(word) in: \(run.stderr)") }
            #expect(run.stderr.components(separatedBy: "error:").count == 2, "one error: \(run.stderr)")
            #expect(!FileManager.default.fileExists(atPath: box.local + "/a.txt"))
        }

        server.setFaults(["/bkt/manifest.json": ["statuses": [503, 503], "retry_after": 0, "body": error("SlowDown")],
                          "/bkt/a.txt": ["statuses": [503], "retry_after": 0, "body": error("SlowDown")],
                          "/bkt/b.txt": ["statuses": [403, 403, 403, 403, 403], "body": error("AccessDenied")]])
        server.clearLog()
        let run = box.sync()
        #expect(run.exitCode == 1, "one file failed: \(run.output)")
        #expect(try String(contentsOfFile: box.local + "/a.txt", encoding: .utf8) == "a\n", "SlowDown is waited out: \(run.output)")
        #expect(!FileManager.default.fileExists(atPath: box.local + "/b.txt"))
        #expect(run.output.contains("b.txt") && run.output.contains("AccessDenied"), "\(run.output)")
        let gets = server.requests().filter { $0["path"] as? String == "/bkt/b.txt" }.count
        #expect(gets == 1, "a refusal is not retried: \(gets) requests")
    }
}
