import Glibc
import FerryCore
import FerryRuntime

/// `ferry config units`: the systemd drop-in the sessions of a config need (`ServiceDropIn`).
struct ConfigUnitsCommand: Command {
    static let words = ["config", "units"]
    static let summary = "Print the systemd drop-in that lets ferry.service and ferry-sync.service write the sessions' directories."
    static let usage = "config units [--config F]"
    static let details = """
        The shipped units may write only their state directory (ProtectSystem=strict) and see no
        home directory (ProtectHome=yes). This prints the drop-in that grants what the config's
        sessions need: each pull's local directory (with layout = generations, the directory
        holding it), the metrics file's directory, a state directory other than /var/lib/ferry,
        and paths under /home bound in. A path that does not exist yet is marked: the unit cannot
        start until it does. Its comment says how to install it for both units:

          mkdir -p /etc/systemd/system/ferry.service.d /etc/systemd/system/ferry-sync.service.d
          ferry config units | tee /etc/systemd/system/ferry.service.d/ferry-paths.conf \\
              /etc/systemd/system/ferry-sync.service.d/ferry-paths.conf >/dev/null
          systemctl daemon-reload && systemctl restart ferry.service
        """
    static let options = [CommonOptions.config, CommonOptions.help]

    let configPath: String?

    init(arguments: Arguments) throws(FerryError) {
        try arguments.expectPositionals(0...0, command: Self.name, what: "")
        configPath = arguments.value("--config")
    }

    func run() throws(FerryError) -> ExitCode {
        let config = try ConfigLoader.load(path: ConfigLoader.resolvePath(configPath), allowingNoSession: true)
        let text = ServiceDropIn.text(for: config) { path in
            var st = stat()
            return stat(path, &st) == 0
        }
        Console.json(text.hasSuffix("\n") ? String(text.dropLast()) : text)
        return .inSync
    }
}
