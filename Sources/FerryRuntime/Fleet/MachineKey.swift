import Glibc
import FerryCore

/// This machine's own Ed25519 key, which signs its status reports: made at first use and kept in
/// the state directory (`machine-key.pem`, PKCS#8 PEM, 0600, as `ferry key generate` writes one).
/// A state directory made again makes a new key: the reader sees a new machine.
public enum MachineKey {
    public static func path(state: String) -> String { state + "/machine-key.pem" }

    /// The key, made now when the state has none.
    static func load(state: String) throws(FerryError) -> SigningKey {
        let file = path(state: state)
        if !FileSystem.exists(file) {
            do { try SigningKey.generate().write(to: file) } catch {
                // Another process of this state made it first: that one is the machine's.
                if !FileSystem.exists(file) { throw error }
            }
        }
        return try SigningKey(file: file, use: "the machine's report key")
    }

    /// The public half of the key, when one was made (for `status`).
    public static func existing(state: String) -> PublicKey? {
        guard FileSystem.exists(path(state: state)) else { return nil }
        return try? SigningKey(file: path(state: state), use: "the machine's report key").publicKey
    }

    /// The name a report gives the machine: `[agent] machine-id`, else /etc/machine-id, else the host name.
    static func identity(_ agent: AgentConfig) -> String {
        HostProbe.machineID(configured: agent.machineID) ?? hostName() ?? "unknown"
    }

    static func hostName() -> String? {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count - 1) == 0 else { return nil }
        let name = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return name.isEmpty ? nil : name
    }
}
