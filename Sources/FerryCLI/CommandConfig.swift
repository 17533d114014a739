import Glibc
import FerryCore
import FerryRuntime

/// The config a command acts on, loaded the one way every command that uses the state does:
/// `--config`, else `$FERRY_CONFIG`, else /etc/ferry/ferry.conf; then the state directory's
/// owner is taken on (`StateOwner.adopt`): root runs the rest as that user, so a command an
/// operator runs as root never leaves a file in the state that the service cannot write.
enum CommandConfig {
    static func load(_ explicit: String?, allowingNoSession: Bool = false) throws(FerryError) -> Config {
        let (config, switched) = try loadAdopting(explicit, allowingNoSession: allowingNoSession)
        if let switched, Console.stderrIsTerminal {
            Console.err("ferry: running as \(switched.user), the owner of the state directory \(config.agent.state)")
        }
        return config
    }

    /// The same, and the user the process switched to, if it did.
    static func loadAdopting(_ explicit: String?, allowingNoSession: Bool = false) throws(FerryError) -> (Config, StateOwner.Switch?) {
        let config = try ConfigLoader.load(path: ConfigLoader.resolvePath(explicit), allowingNoSession: allowingNoSession)
        return (config, try StateOwner.adopt(state: config.agent.state))
    }
}
