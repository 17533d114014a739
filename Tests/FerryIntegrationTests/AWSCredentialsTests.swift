import Foundation
import Testing
@testable import FerryRuntime
import FerryCore

/// S3 credentials the AWS way (issue 38): the chain the AWS SDKs use when a session names no
/// `s3-credentials` — environment, shared credentials file, config file, web identity (a real STS:
/// moto's), container credentials and EC2 instance metadata (scripts/credserver.py) — in that
/// order; profiles and their regions; hostile answers refused with the source named; temporary
/// credentials renewed before they expire in a running agent, the renewed keys signing requests
/// the store (SeaweedFS, behind an nginx that logs who signed) accepts; and secrets never shown.
@Suite(.serialized)
struct AWSCredentialsTests {
    // MARK: Parsing

    /// The answers of STS, a container endpoint and the instance metadata, and the AWS files,
    /// parsed strictly: each refusal names what is wrong, never a value that could be a secret.
    @Test func parsesAnswersStrictly() throws {
        func json(_ text: String, instance: Bool = false) -> Result<S3Credentials, ConfigProblem> {
            do { return .success(try S3CredentialFetch.jsonCredentials(Array(text.utf8), requireSuccess: instance)) } catch { return .failure(error) }
        }
        func refusal(_ result: Result<S3Credentials, ConfigProblem>) -> String {
            if case let .failure(problem) = result { return problem.message }
            return "accepted"
        }
        let good = #"{"AccessKeyId": "ASIAGOOD", "SecretAccessKey": "s/+=", "Token": "tok", "Expiration": "2026-01-02T03:04:05Z"}"#
        let parsed = try json(good).get()
        #expect(parsed.accessKey == "ASIAGOOD" && parsed.secretKey == "s/+=" && parsed.sessionToken == "tok")
        #expect(parsed.expiration == Timestamp(rfc3339: "2026-01-02T03:04:05Z"))
        #expect("\(parsed)" == "access key ASIAGOOD")
        // Fractions and offsets are RFC 3339 too; the container protocol has no Code, the instance's
        // must say Success when it says one (an answer without it is taken, as the AWS CLI takes it).
        #expect(try json(#"{"AccessKeyId": "A", "SecretAccessKey": "s", "Expiration": "2026-01-02T03:04:05.123+01:00"}"#).get().sessionToken == nil)
        #expect(try json(good, instance: true).get().accessKey == "ASIAGOOD")
        #expect(refusal(json(#"{"Code": "", "AccessKeyId": "A"}"#, instance: true)) == "says Code '', not Success")
        #expect(refusal(json(#"{"Code": "AssumeRoleUnauthorizedAccess", "AccessKeyId": "A"}"#, instance: true))
                == "says Code 'AssumeRoleUnauthorizedAccess', not Success")
        let cases: [(String, String)] = [
            ("<html>not json</html>", "is not one JSON object as RFC 8259 writes it: unexpected character '<' (line 1, column 1)"),
            (#"[{"AccessKeyId": "A"}]"#, "is not one JSON object as RFC 8259 writes it: expected one JSON object (line 1, column 1)"),
            (#"{"AccessKeyId": "A", "SecretAccessKey": "s"} trailing"#,
             "is not one JSON object as RFC 8259 writes it: unexpected data after the end of the document (line 1, column 46)"),
            // Which key would count depends on the reader: none does.
            (#"{"AccessKeyId": "A", "AccessKeyId": "B", "SecretAccessKey": "s", "Expiration": "2026-01-02T03:04:05Z"}"#,
             "is not one JSON object as RFC 8259 writes it: member \"AccessKeyId\" is given twice in one object (JSON readers disagree on which one counts) (line 1, column 22)"),
            (#"{"SecretAccessKey": "s", "Expiration": "2026-01-02T03:04:05Z"}"#, "has no AccessKeyId"),
            (#"{"AccessKeyId": "A", "Expiration": "2026-01-02T03:04:05Z"}"#, "has no SecretAccessKey"),
            (#"{"AccessKeyId": "A", "SecretAccessKey": "s"}"#, "has no Expiration"),
            (#"{"AccessKeyId": "A", "SecretAccessKey": "s", "Expiration": "tomorrow"}"#, "has an Expiration that is not an RFC 3339 time: 'tomorrow'"),
            (#"{"AccessKeyId": "A", "SecretAccessKey": "s", "Expiration": "2026-02-30T00:00:00Z"}"#, "has an Expiration that is not an RFC 3339 time: '2026-02-30T00:00:00Z'"),
            (#"{"AccessKeyId": "A", "SecretAccessKey": "s\r\nX-Evil: 1", "Expiration": "2026-01-02T03:04:05Z"}"#, "SecretAccessKey holds a control character"),
            (#"{"AccessKeyId": "\#(String(repeating: "A", count: 200))", "SecretAccessKey": "s", "Expiration": "2026-01-02T03:04:05Z"}"#,
             "AccessKeyId is longer than 128 bytes"),
        ]
        for (text, wanted) in cases {
            let said = refusal(json(text))
            #expect(said == wanted, "\(text)")
            #expect(!said.contains("X-Evil") && !said.contains("s\r"), "a refusal never repeats a key")
        }

        let sts = """
            <AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><AssumeRoleWithWebIdentityResult>
            <Credentials><AccessKeyId>ASIASTS</AccessKeyId><SecretAccessKey>a&amp;b</SecretAccessKey><SessionToken>T&#43;1</SessionToken>
            <Expiration>2026-11-26T05:43:40.392330Z</Expiration></Credentials></AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>
            """
        let fromSTS = try S3CredentialFetch.stsCredentials(Array(sts.utf8))
        #expect(fromSTS.accessKey == "ASIASTS" && fromSTS.secretKey == "a&b" && fromSTS.sessionToken == "T+1")
        #expect(fromSTS.expiration == Timestamp(rfc3339: "2026-11-26T05:43:40.392330Z"))
        func stsRefusal(_ text: String) -> String {
            do { _ = try S3CredentialFetch.stsCredentials(Array(text.utf8)); return "accepted" } catch { return error.message }
        }
        #expect(stsRefusal("<ErrorResponse><Error><Code>AccessDenied</Code></Error></ErrorResponse>") == "holds no <Credentials>")
        #expect(stsRefusal(sts.replacing("<SessionToken>T&#43;1</SessionToken>", with: "")) == "has no SessionToken")
        #expect(stsRefusal(sts.replacing("2026-11-26T05:43:40.392330Z", with: "26/11/2026")).contains("not an RFC 3339 time"))

        let files = """
            # a comment
            [default]
            aws_access_key_id = AKDEFAULT
            region = eu-north-1
            [profile deploy]
            AWS_Access_Key_Id=AKDEPLOY
            s3 =
              region = nested-is-not-ours
            ; another comment
            [bare]
            region = ap-south-1
            """
        let asCredentials = AWSProfiles(files, kind: .credentials)
        #expect(asCredentials.profile("default")?["aws_access_key_id"] == "AKDEFAULT")
        #expect(asCredentials.profile("deploy")?["aws_access_key_id"] == "AKDEPLOY", "key names are case-insensitive; [profile x] is taken too")
        #expect(asCredentials.profile("deploy")?["region"] == nil, "an indented line belongs to the key above it")
        #expect(asCredentials.profile("bare")?["region"] == "ap-south-1" && asCredentials.profile("other") == nil)
        let asConfig = AWSProfiles(files, kind: .config)
        #expect(asConfig.profile("default")?["region"] == "eu-north-1" && asConfig.profile("deploy") != nil)
        #expect(asConfig.profile("bare") == nil, "the config file names a profile [profile NAME]")
    }

    // MARK: The chain

    /// With every source set, each one that is taken away hands over to the next: environment,
    /// shared credentials file, config file, web identity, container, instance metadata; with
    /// none, `config check` fails with every source tried in its hint. No secret is ever shown.
    @Test func sourcesAreTakenInTheAWSOrder() throws {
        let moto = try MotoServer()
        let metadata = try CredentialServer()
        metadata.configure(["credentials": [["AccessKeyId": "ASIAMETADATA", "SecretAccessKey": "metadata-secret", "Token": "metadata-token"]]])
        let box = Sandbox("aws-chain")
        box.configure(remote: "s3://bucket/site/", session: ["s3-endpoint = http://127.0.0.1:1"])
        let home = box.directory + "/home"
        try FileManager.default.createDirectory(atPath: home + "/.aws", withIntermediateDirectories: true)
        try "[default]\naws_access_key_id = AKFILE\naws_secret_access_key = file-secret\n".writeReplacing(home + "/.aws/credentials")
        try "[default]\naws_access_key_id = AKCONFIG\naws_secret_access_key = config-secret\nregion = eu-west-3\n".writeReplacing(home + "/.aws/config")
        let webToken = "eyJhbGciOiJSUzI1NiJ9.web-identity-token.signature"
        try webToken.writeReplacing(box.directory + "/web-token")
        let secrets = ["env-secret", "env-token", "file-secret", "config-secret", "metadata-secret", "metadata-token", webToken]
        var env = ["HOME": home, "AWS_ACCESS_KEY_ID": "AKENV", "AWS_SECRET_ACCESS_KEY": "env-secret", "AWS_SESSION_TOKEN": "env-token",
                   "AWS_WEB_IDENTITY_TOKEN_FILE": box.directory + "/web-token", "AWS_ROLE_ARN": "arn:aws:iam::123456789012:role/ferry",
                   "AWS_ROLE_SESSION_NAME": "ferry-test", "AWS_ENDPOINT_URL_STS": moto.endpoint,
                   "AWS_CONTAINER_CREDENTIALS_FULL_URI": metadata.containerURL,
                   "AWS_EC2_METADATA_DISABLED": "", "AWS_EC2_METADATA_SERVICE_ENDPOINT": metadata.endpoint]
        func check(_ wanted: String, sourceLocation: SourceLocation = #_sourceLocation) {
            let run = ferry(["config", "check", "--config", box.config], environment: env)
            #expect(run.exitCode == 0 && run.stdout.contains("    credentials: " + wanted), "\(run.output)", sourceLocation: sourceLocation)
            for secret in secrets { #expect(!run.output.contains(secret), "a secret was shown: \(run.output)", sourceLocation: sourceLocation) }
        }
        check("environment, access key AKENV")
        env["AWS_ACCESS_KEY_ID"] = ""
        env["AWS_SECRET_ACCESS_KEY"] = ""
        check("shared credentials file \(home)/.aws/credentials [default], access key AKFILE")
        unlink(home + "/.aws/credentials")
        check("config file \(home)/.aws/config [default], access key AKCONFIG")
        // The config file's region is the session's (it sets no s3-region).
        #expect(ferry(["config", "check", "--config", box.config], environment: env).stdout
            .contains("    region: eu-west-3 (region of [default] in \(home)/.aws/config)"))
        try "[default]\nregion = eu-west-3\n".writeReplacing(home + "/.aws/config")
        check("web identity (role arn:aws:iam::123456789012:role/ferry) through STS \(moto.endpoint), access key ASIA")
        env["AWS_ROLE_ARN"] = ""
        check("container credentials \(metadata.containerURL), access key ASIAMETADATA, valid until ")
        env["AWS_CONTAINER_CREDENTIALS_FULL_URI"] = ""
        check("EC2 instance metadata (IMDSv2) \(metadata.endpoint), access key ASIAMETADATA, valid until ")
        // moto's instance metadata answers a role's credentials without Code: taken on its four fields.
        env["AWS_EC2_METADATA_SERVICE_ENDPOINT"] = moto.endpoint
        check("EC2 instance metadata (IMDSv2) \(moto.endpoint), access key test-key, valid until ")
        env["AWS_EC2_METADATA_SERVICE_ENDPOINT"] = metadata.endpoint
        // IMDSv2 only: the server refuses a request without its session token, so ferry asked for one.
        let unsigned = runProcess("/usr/bin/curl", ["-s", "-o", "/dev/null", "-w", "%{http_code}", metadata.endpoint + "/latest/meta-data/iam/security-credentials/"])
        #expect(unsigned.stdout == "401")
        #expect(metadata.requests().contains { $0["method"] as? String == "PUT" && $0["path"] as? String == "/latest/api/token" && $0["status"] as? Int == 200 })

        // Nothing left: one problem, whose hint names every source and why it had nothing.
        env["AWS_EC2_METADATA_DISABLED"] = "true"
        let none = ferry(["config", "check", "--config", box.config], environment: env)
        #expect(none.exitCode == 2, "\(none.output)")
        #expect(none.stderr.contains("[session test] S3 credentials: none found: the session has no s3-credentials"))
        for tried in ["the environment (AWS_ACCESS_KEY_ID is not set)", "\(home)/.aws/credentials (no such file)",
                      "\(home)/.aws/config (no keys or web identity in [default])", "web identity (AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN are not both set)",
                      "container credentials (AWS_CONTAINER_CREDENTIALS_RELATIVE_URI and _FULL_URI are not set)",
                      "EC2 instance metadata (AWS_EC2_METADATA_DISABLED=true)", "s3-credentials ="] {
            #expect(none.stderr.contains(tried), "hint: \(none.stderr)")
        }
        #expect(none.stderr.components(separatedBy: "error:").count == 2, "one error: \(none.stderr)")
        // A sync says the same, and `config show` names the state of things without failing.
        let sync = box.sync(environment: env)
        #expect(sync.exitCode == 2 && sync.stderr.contains("none found"), "\(sync.output)")
        let show = ferry(["config", "show", "--config", box.config], environment: env)
        #expect(show.exitCode == 0 && show.stdout.contains("(the AWS chain: none usable: S3 credentials: none found"), "\(show.output)")
    }

    /// `AWS_PROFILE` picks the profile, else `s3-profile`, else `default`; a named profile that
    /// neither file holds is an error; the profile's region signs unless `s3-region` is set; a
    /// profile that needs a program or another profile is refused in words.
    @Test func profilesPickKeysAndRegion() throws {
        let store = try SeaweedFS.shared()
        let proxy = try NginxServer(proxyTo: store.port)
        defer { proxy.stop() }
        let bucket = try store.newBucket("profiles")
        let box = Sandbox("aws-profiles")
        box.publish("a.txt", "from the deploy profile\n")
        box.buildManifest()
        try store.putTree(box.published, bucket: bucket, prefix: "site/")
        let home = box.directory + "/home"
        try FileManager.default.createDirectory(atPath: home + "/.aws", withIntermediateDirectories: true)
        try """
            [default]
            aws_access_key_id = AKWRONG
            aws_secret_access_key = wrong-secret
            [deploy]
            aws_access_key_id = \(SeaweedFS.accessKey)
            aws_secret_access_key = \(SeaweedFS.secretKey)
            """.writeReplacing(home + "/.aws/credentials", mode: 0o600)
        try """
            [default]
            region = us-west-1
            [profile deploy]
            region = eu-west-3
            [profile tool]
            credential_process = /usr/local/bin/get-keys
            """.writeReplacing(home + "/.aws/config")
        let session = ["s3-endpoint = http://127.0.0.1:\(proxy.port)"]
        box.configure(remote: "s3://\(bucket)/site/", session: session)
        let env = ["HOME": home, "AWS_PROFILE": "deploy"]
        let check = ferry(["config", "check", "--config", box.config], environment: env)
        #expect(check.exitCode == 0, "\(check.output)")
        #expect(check.stdout.contains("credentials: shared credentials file \(home)/.aws/credentials [deploy], access key \(SeaweedFS.accessKey)"))
        #expect(check.stdout.contains("region: eu-west-3 (region of [profile deploy] in \(home)/.aws/config)"))
        let show = ferry(["config", "show", "--config", box.config], environment: env)
        #expect(show.stdout.contains("(the AWS chain: shared credentials file \(home)/.aws/credentials [deploy], access key …)") && !show.stdout.contains(SeaweedFS.accessKey), "\(show.stdout)")
        #expect(show.stdout.contains("(eu-west-3: region of [profile deploy] in \(home)/.aws/config)"), "\(show.stdout)")

        // The profile's keys sign, in its region, and the store accepts them.
        let run = box.sync(environment: env)
        #expect(run.exitCode == 0, "\(run.output)")
        expectIdentical(box.published, box.local)
        let signed = proxy.signedRequests()
        #expect(!signed.isEmpty && signed.allSatisfy { $0.accessKey == SeaweedFS.accessKey && $0.region == "eu-west-3" && $0.status < 400 }, "\(signed)")
        #expect(!run.output.contains(SeaweedFS.secretKey))

        // Without AWS_PROFILE, s3-profile; AWS_PROFILE beats it; s3-region beats the profile's.
        box.configure(remote: "s3://\(bucket)/site/", session: session + ["s3-profile = deploy", "s3-region = ap-south-1"])
        let fromConfig = ferry(["config", "check", "--config", box.config], environment: ["HOME": home])
        #expect(fromConfig.stdout.contains("[deploy], access key \(SeaweedFS.accessKey)") && fromConfig.stdout.contains("region: ap-south-1 (s3-region)"),
                "\(fromConfig.output)")
        let overridden = ferry(["config", "check", "--config", box.config], environment: ["HOME": home, "AWS_PROFILE": "default"])
        #expect(overridden.stdout.contains("[default], access key AKWRONG"), "\(overridden.output)")
        // Keys the store does not know: the error names where they came from.
        let refused = box.sync(environment: ["HOME": home, "AWS_PROFILE": "default"])
        #expect(refused.exitCode == 4 && refused.stderr.contains("InvalidAccessKeyId")
                && refused.stderr.contains("check the access key id of the credentials from shared credentials file \(home)/.aws/credentials [default]"),
                "\(refused.output)")
        #expect(!refused.output.contains("wrong-secret"))

        // A profile neither file holds, and one that would run a program.
        let missing = ferry(["config", "check", "--config", box.config], environment: ["HOME": home, "AWS_PROFILE": "nope"])
        #expect(missing.exitCode == 2 && missing.stderr.contains(
            "the profile 'nope' (AWS_PROFILE) is neither in \(home)/.aws/credentials nor in \(home)/.aws/config"), "\(missing.output)")
        let tool = ferry(["config", "check", "--config", box.config], environment: ["HOME": home, "AWS_PROFILE": "tool"])
        #expect(tool.exitCode == 2 && tool.stderr.contains("[profile tool] gets its credentials through credential_process, which ferry does not run"),
                "\(tool.output)")
        // AWS_SHARED_CREDENTIALS_FILE and AWS_CONFIG_FILE move the files.
        let moved = ferry(["config", "check", "--config", box.config],
                          environment: ["HOME": box.directory, "AWS_SHARED_CREDENTIALS_FILE": home + "/.aws/credentials", "AWS_CONFIG_FILE": home + "/.aws/config"])
        #expect(moved.stdout.contains("credentials: shared credentials file \(home)/.aws/credentials [deploy]"), "\(moved.output)")
        // With s3-credentials, that file and profile alone: AWS_PROFILE does not change it.
        box.configure(remote: "s3://\(bucket)/site/", session: session + ["s3-credentials = \(home)/.aws/credentials", "s3-profile = deploy"])
        let named = ferry(["config", "check", "--config", box.config], environment: ["HOME": home, "AWS_PROFILE": "default"])
        #expect(named.stdout.contains("credentials: s3-credentials \(home)/.aws/credentials [deploy], access key \(SeaweedFS.accessKey)"), "\(named.output)")
        #expect(named.stdout.contains("region: us-east-1 (the default)"), "the AWS config file is not read: \(named.output)")
    }

    // MARK: Web identity

    /// AssumeRoleWithWebIdentity against a real STS (moto's), from the environment and from a
    /// config-file profile: the temporary keys and their session token sign every request of a
    /// sync; a missing token file and an STS that refuses are errors naming the source.
    @Test func webIdentityAssumesTheRoleThroughSTS() throws {
        let moto = try MotoServer()
        let proxy = try NginxServer(proxyTo: moto.port)
        defer { proxy.stop() }
        let bucket = try moto.newBucket("webid")
        let box = Sandbox("aws-web-identity")
        box.publish("docs/readme.txt", "signed with a role's keys\n")
        box.publish("big.bin", randomData(300_000, seed: 38))
        box.buildManifest()
        try moto.putTree(box.published, bucket: bucket, prefix: "site/")
        let token = "eyJraWQiOiJ0ZXN0In0.eyJzdWIiOiJmZXJyeSJ9.c2lnbmF0dXJl"
        try token.writeReplacing(box.directory + "/token")
        box.configure(remote: "s3://\(bucket)/site/", session: ["s3-endpoint = http://127.0.0.1:\(proxy.port)"])
        let role = "arn:aws:iam::123456789012:role/ferry-pull"
        let env = ["HOME": box.directory, "AWS_WEB_IDENTITY_TOKEN_FILE": box.directory + "/token", "AWS_ROLE_ARN": role,
                   "AWS_ENDPOINT_URL_STS": moto.endpoint]
        let check = ferry(["config", "check", "--config", box.config], environment: env)
        #expect(check.exitCode == 0 && check.stdout.contains("credentials: web identity (role \(role)) through STS \(moto.endpoint), access key ASIA"),
                "\(check.output)")
        #expect(check.stdout.contains(", valid until 20"))

        let run = box.sync(environment: env)
        #expect(run.exitCode == 0, "\(run.output)")
        expectIdentical(box.published, box.local)
        let signed = proxy.signedRequests()
        #expect(signed.count >= 3 && signed.allSatisfy { ($0.accessKey ?? "").hasPrefix("ASIA") && ($0.token ?? "").count > 20 && $0.status < 400 },
                "every request carries the role's keys and session token: \(signed)")
        for output in [check.output, run.output] { #expect(!output.contains(token) && !output.contains("FQoG"), "no token is shown") }

        // The same role from a config-file profile (AWS_ENDPOINT_URL serves STS too).
        try FileManager.default.createDirectory(atPath: box.directory + "/.aws", withIntermediateDirectories: true)
        try "[profile ci]\nrole_arn = \(role)\nweb_identity_token_file = \(box.directory)/token\nrole_session_name = ci-run\n"
            .writeReplacing(box.directory + "/.aws/config")
        let fromProfile = ferry(["config", "check", "--config", box.config],
                                environment: ["HOME": box.directory, "AWS_PROFILE": "ci", "AWS_ENDPOINT_URL": moto.endpoint])
        #expect(fromProfile.exitCode == 0 && fromProfile.stdout.contains("credentials: web identity (role \(role)) through STS \(moto.endpoint)"),
                "\(fromProfile.output)")

        // No token file; an STS that does not speak STS.
        unlink(box.directory + "/token")
        let noToken = ferry(["config", "check", "--config", box.config], environment: env)
        #expect(noToken.exitCode == 2 && noToken.stderr.contains("web identity (role \(role)) through STS \(moto.endpoint): the web identity token: cannot read"),
                "\(noToken.output)")
        try token.writeReplacing(box.directory + "/token")
        let notSTS = try CredentialServer()
        var wrong = env
        wrong["AWS_ENDPOINT_URL_STS"] = notSTS.endpoint
        let refused = ferry(["config", "check", "--config", box.config], environment: wrong)
        #expect(refused.exitCode == 2 && refused.stderr.contains("through STS \(notSTS.endpoint): STS refused AssumeRoleWithWebIdentity: HTTP 501"),
                "\(refused.output)")
        #expect(!refused.output.contains(token))
    }

    // MARK: Container and instance metadata

    /// The container protocol with its authorization token from a file: the keys it hands out
    /// sign requests the store accepts. A wrong token, and an http:// endpoint off this machine,
    /// are refused (the latter before any request).
    @Test func containerCredentialsSignAcceptedRequests() throws {
        let store = try SeaweedFS.shared()
        let proxy = try NginxServer(proxyTo: store.port)
        defer { proxy.stop() }
        let source = try CredentialServer()
        let keys = SeaweedFS.handedOutKeys[0]
        source.configure(["credentials": [["AccessKeyId": keys.accessKey, "SecretAccessKey": keys.secretKey]], "authorization": "container-auth-7f3a"])
        let bucket = try store.newBucket("container")
        let box = Sandbox("aws-container")
        box.publish("x/y.txt", "from a container's role\n")
        box.buildManifest()
        try store.putTree(box.published, bucket: bucket, prefix: "site/")
        try "container-auth-7f3a\n".writeReplacing(box.directory + "/auth-token")
        box.configure(remote: "s3://\(bucket)/site/", session: ["s3-endpoint = http://127.0.0.1:\(proxy.port)"])
        let env = ["AWS_CONTAINER_CREDENTIALS_FULL_URI": source.containerURL, "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE": box.directory + "/auth-token"]
        let run = box.sync(environment: env)
        #expect(run.exitCode == 0, "\(run.output)")
        expectIdentical(box.published, box.local)
        let signed = proxy.signedRequests()
        #expect(!signed.isEmpty && signed.allSatisfy { $0.accessKey == keys.accessKey && $0.token == nil && $0.status < 400 }, "\(signed)")
        #expect(!run.output.contains(keys.secretKey) && !run.output.contains("container-auth-7f3a"))

        let wrong = ferry(["config", "check", "--config", box.config],
                          environment: ["AWS_CONTAINER_CREDENTIALS_FULL_URI": source.containerURL, "AWS_CONTAINER_AUTHORIZATION_TOKEN": "not-the-token"])
        #expect(wrong.exitCode == 2 && wrong.stderr.contains("container credentials \(source.containerURL): HTTP 401"), "\(wrong.output)")
        #expect(wrong.stderr.contains("check the container's authorization token") && !wrong.output.contains("not-the-token"))
        let before = source.requests().count
        let offMachine = ferry(["config", "check", "--config", box.config], environment: ["AWS_CONTAINER_CREDENTIALS_FULL_URI": "http://192.0.2.10/creds"])
        #expect(offMachine.exitCode == 2 && offMachine.stderr.contains("AWS_CONTAINER_CREDENTIALS_FULL_URI must be https://, or http:// to a loopback address"),
                "\(offMachine.output)")
        #expect(source.requests().count == before)
    }

    /// Instance metadata answers that are too large, not JSON, badly dated, already expired, not
    /// `Success` or an error status: each refused, naming the source. A metadata service that
    /// does not answer leaves the session without credentials, every source tried named.
    @Test func hostileMetadataAnswersAreRefused() throws {
        let source = try CredentialServer()
        let box = Sandbox("aws-hostile")
        box.configure(remote: "s3://bucket/site/", session: ["s3-endpoint = http://127.0.0.1:1"])
        let env = ["AWS_EC2_METADATA_DISABLED": "", "AWS_EC2_METADATA_SERVICE_ENDPOINT": source.endpoint]
        let named = "EC2 instance metadata (IMDSv2) \(source.endpoint): "
        let soon = Timestamp(seconds: unixSeconds() + 3)
        let cases: [([String: Any], String)] = [
            (["huge": 200_000], "the answer to \"fetch the credentials of role ferry-test-role\" is larger than 64 KiB; refused"),
            (["body": "{\"AccessKeyId\": "], "the credentials of role ferry-test-role is not one JSON object"),
            (["expiration": "in an hour"], "has an Expiration that is not an RFC 3339 time: 'in an hour'"),
            (["expiration": "2001-01-01T00:00:00Z"], "gave S3 credentials that expire at 2001-01-01T00:00:00Z, which is not after now"),
            // Seconds from expiry: said as that, not as "not after now".
            (["expiration": soon.rfc3339], "gave S3 credentials that expire at \(soon.rfc3339), "),
            (["code": "Failure"], "says Code 'Failure', not Success"),
            (["status": 500], "cannot fetch the credentials of role ferry-test-role: HTTP 500"),
            (["role": "bad role\u{1b}[31m"], "the instance's IAM role name is not 1 to 128 letters"),
        ]
        for (settings, wanted) in cases {
            var settings = settings
            settings["credentials"] = [["AccessKeyId": "ASIAHOSTILE", "SecretAccessKey": "hostile-secret", "Token": "hostile-token"]]
            source.configure(settings)
            let run = ferry(["config", "check", "--config", box.config], environment: env)
            #expect(run.exitCode == 2 && run.stderr.contains(wanted), "\(settings): \(run.output)")
            #expect(run.stderr.contains(wanted.hasPrefix("gave") ? "EC2 instance metadata (IMDSv2) \(source.endpoint) gave" : named), "\(run.output)")
            #expect(!run.output.contains("hostile-secret") && !run.output.contains("hostile-token") && !run.output.contains("\u{1b}"))
            #expect(!run.stderr.contains("ferry looked at"), "an answer, however bad, is not a missing source")
        }
        source.configure(["expiration": Timestamp(seconds: unixSeconds() + 3).rfc3339,
                          "credentials": [["AccessKeyId": "ASIAHOSTILE", "SecretAccessKey": "hostile-secret", "Token": "hostile-token"]]])
        let near = ferry(["config", "check", "--config", box.config], environment: env)
        #expect(near.stderr.contains("from now (") && near.stderr.contains("too soon to sign a request with (ferry wants 5s or more)")
                && !near.stderr.contains("not after now"), "\(near.output)")

        // Not an EC2 instance: nothing answers, and the error says where else ferry looked.
        let closed = freePort()
        let nothing = ferry(["config", "check", "--config", box.config],
                            environment: ["AWS_EC2_METADATA_DISABLED": "", "AWS_EC2_METADATA_SERVICE_ENDPOINT": "http://127.0.0.1:\(closed)"])
        #expect(nothing.exitCode == 2 && nothing.stderr.contains("EC2 instance metadata (IMDSv2) http://127.0.0.1:\(closed): cannot get a metadata session token"),
                "\(nothing.output)")
        #expect(nothing.stderr.contains("ferry looked at, in order: the environment"), "\(nothing.output)")
    }

    // MARK: Refresh

    /// Short-lived keys from the instance metadata, in a running agent: they are fetched again
    /// before they expire, and the renewed keys (another identity of the store) sign requests the
    /// store accepts — the agent keeps mirroring what is published.
    @Test func agentRenewsCredentialsBeforeTheyExpire() throws {
        let store = try SeaweedFS.shared()
        let proxy = try NginxServer(proxyTo: store.port)
        defer { proxy.stop() }
        let source = try CredentialServer()
        let (first, second) = (SeaweedFS.handedOutKeys[0], SeaweedFS.handedOutKeys[1])
        // 30 s: renewed from 15 s before the end, and not used in the last 5, so the agent's polls
        // (every second, each one a chance to renew) have 10 s to renew in, even on a loaded host.
        source.configure(["lifetime": 30, "credentials": [["AccessKeyId": first.accessKey, "SecretAccessKey": first.secretKey],
                                                         ["AccessKeyId": second.accessKey, "SecretAccessKey": second.secretKey]]])
        let bucket = try store.newBucket("refresh")
        let box = Sandbox("aws-refresh")
        box.publish("one.txt", "before the refresh\n")
        box.buildManifest()
        try store.putTree(box.published, bucket: bucket, prefix: "site/")
        box.configure(remote: "s3://\(bucket)/site/", session: ["s3-endpoint = http://127.0.0.1:\(proxy.port)", "poll = 1s"], agent: ["stop-timeout = 3s"])
        let agent = try AgentTests.RunningAgent(box, environment: ["AWS_EC2_METADATA_DISABLED": "", "AWS_EC2_METADATA_SERVICE_ENDPOINT": source.endpoint])
        #expect(eventually { fileContents(box.localPath("one.txt")) == "before the refresh\n" }, "mirrored: \(agent.output)")
        #expect(eventually(60) { source.handedOut().count >= 2 }, "fetched again: \(source.requests()) \(agent.output)")
        let handed = source.handedOut()
        let firstExpiry = try #require(Timestamp(rfc3339: handed[0].expiration)).timeInterval
        #expect(handed[1].time < firstExpiry, "renewed before the first keys expired (\(handed[1].time) vs \(firstExpiry))")
        #expect(handed[0].accessKey == first.accessKey && handed[1].accessKey == second.accessKey)

        // What is published next comes through, signed with the renewed keys.
        box.publish("two.txt", "after the refresh\n")
        box.buildManifest()
        try store.putTree(box.published, bucket: bucket, prefix: "site/")
        #expect(eventually(30) { fileContents(box.localPath("two.txt")) == "after the refresh\n" }, "mirrored: \(agent.output)")
        let signed = proxy.signedRequests()
        #expect(signed.contains { $0.accessKey == second.accessKey && $0.path.hasSuffix("/two.txt") && $0.status == 200 }, "\(signed)")
        #expect(signed.allSatisfy { $0.status < 400 }, "no request was refused: \(signed.filter { $0.status >= 400 })")
        agent.child.stop()
        for secret in [first.secretKey, second.secretKey] { #expect(!agent.output.contains(secret)) }
    }

    /// A refresh that fails while the keys still hold keeps them (and waits before trying again);
    /// once they have expired, the failing source is an error naming it; when it answers again,
    /// new keys come. Times are given to the provider, not waited for.
    @Test func aFailedRefreshKeepsValidKeysThenNamesTheSource() throws {
        let source = try CredentialServer()
        source.configure(["lifetime": 600, "credentials": [["AccessKeyId": "ASIAFIRST", "SecretAccessKey": "first-secret", "Token": "t1"],
                                                           ["AccessKeyId": "ASIASECOND", "SecretAccessKey": "second-secret", "Token": "t2"]]])
        let box = Sandbox("aws-failing")
        box.configure(remote: "s3://bucket/site/", session: ["s3-endpoint = http://127.0.0.1:1"])
        let session = try ConfigLoader.load(path: box.config).sessions[0]
        let chain = try S3CredentialChain.resolve(session) { ["HOME": box.directory, "AWS_CONTAINER_CREDENTIALS_FULL_URI": source.containerURL][$0] }
        let provider = chain.provider
        #expect(provider.source == "container credentials \(source.containerURL)")
        let held = try provider.current(now: SystemClock().now())
        let expiry = try #require(held.expiration).timeInterval
        #expect(held.accessKey == "ASIAFIRST" && source.handedOut().count == 1)
        #expect(try provider.current(now: SystemClock().now()).accessKey == "ASIAFIRST" && source.requests().count == 1, "kept while fresh")

        source.configure(["status": 503])
        // Within the last 5 minutes: the held keys sign at once, and the renewal runs beside them.
        let renewing = Timestamp(seconds: Int64(expiry) - 60)
        #expect(try provider.current(now: renewing).accessKey == "ASIAFIRST", "kept while still valid")
        #expect(eventually { source.requests().count == 2 } && source.requests().last?["status"] as? Int == 503, "a refresh was tried")
        // A failed renewal is tried again after a quarter of what is left (15 s here), not at once.
        #expect(eventually { (try? provider.current(now: Timestamp(seconds: Int64(expiry) - 59)))?.accessKey == "ASIAFIRST" })
        #expect(source.requests().count == 2, "not tried again at once")
        #expect(try provider.current(now: Timestamp(seconds: Int64(expiry) - 40)).accessKey == "ASIAFIRST")
        #expect(eventually { source.requests().count == 3 }, "tried again later")

        // Once they expired, the caller fetches; a failure names the source, and is said again
        // without asking it for the next few seconds.
        let expired = #expect(throws: FerryError.self) { try provider.current(now: Timestamp(seconds: Int64(expiry) + 1)) }
        #expect(expired?.message.hasPrefix("the S3 credentials from container credentials \(source.containerURL) expired at ") == true, "\(String(describing: expired))")
        #expect(expired?.message.contains("HTTP 503") == true && expired?.message.contains("first-secret") == false)
        let asked = source.requests().count
        #expect(throws: FerryError.self) { try provider.current(now: Timestamp(seconds: Int64(expiry) + 2)) }
        #expect(source.requests().count == asked, "within the backoff the source is not asked")

        // (They must outlive the moment given, which is past the first ones' end.)
        source.configure(["lifetime": 1200, "credentials": [["AccessKeyId": "ASIASECOND", "SecretAccessKey": "second-secret", "Token": "t2"]]])
        let later = Timestamp(seconds: Int64(expiry) + 1 + Int64(S3CredentialProvider.failureBackoff))
        #expect(try provider.current(now: later).accessKey == "ASIASECOND")
    }
}
