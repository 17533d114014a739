import Testing
import FerryCore

/// `[agent] budget`: what it reads, and the periods it is spent in, in the machine's time zone.
struct ByteBudgetTests {
    @Test func readsASizePerDayOrMonth() throws {
        let config = try ConfigParser.parse("""
            [agent]
            budget = 1.5G / month
            [session a]
            remote = http://h/
            local = /x
            budget = exempt
            [session b]
            remote = http://h/
            local = /y
            """, path: "f.conf")
        #expect(config.agent.budget == ByteBudget(bytes: 3 << 29, period: .month))
        #expect(config.agent.budget?.description == "1536M/month")
        #expect(config.sessions[0].budgetExempt && !config.sessions[1].budgetExempt)
        #expect(try ByteBudget(parsing: "100M/DAY") == ByteBudget(bytes: 100 << 20, period: .day))
        let none = try ConfigParser.parse("[agent]\nbudget = none\n[session a]\nremote = http://h/\nlocal = /x\n", path: "f.conf")
        #expect(none.agent.budget == nil)
    }

    /// A day runs from local midnight to the next, a month from the 1st to the 1st; keys name them.
    @Test func periodsFollowTheLocalCalendar() throws {
        let day = ByteBudget(bytes: 1 << 20, period: .day)
        let noon = try #require(Timestamp(localTime: "2030-01-31 12:00:00"))
        let d = day.window(at: noon)
        #expect(d.key == "day:2030-01-31")
        #expect(d.start == Timestamp(localTime: "2030-01-31 00:00:00"))
        #expect(d.end == Timestamp(localTime: "2030-02-01 00:00:00"), "the day after the 31st is the 1st")
        #expect(day.window(at: Timestamp(seconds: d.end.seconds - 1)).key == d.key)
        #expect(day.window(at: d.end).key == "day:2030-02-01")

        let month = ByteBudget(bytes: 1 << 30, period: .month)
        let m = month.window(at: try #require(Timestamp(localTime: "2030-12-15 23:59:59")))
        #expect(m.key == "month:2030-12")
        #expect(m.start == Timestamp(localTime: "2030-12-01 00:00:00"))
        #expect(m.end == Timestamp(localTime: "2031-01-01 00:00:00"), "December ends in the next year")
    }

    @Test func aBudgetIsSpentAtItsSizeAndSaysWhenItIsWholeAgain() throws {
        let budget = ByteBudget(bytes: 100 << 20, period: .day)
        let window = budget.window(at: try #require(Timestamp(localTime: "2030-01-10 08:00")))
        #expect(budget.spent(used: (100 << 20) - 1, window: window) == nil)
        let said = try #require(budget.spent(used: 100 << 20, window: window))
        #expect(said.contains("100M/day") && said.contains("100.0 MiB used") && said.contains(window.end.rfc3339), "\(said)")
    }
}
