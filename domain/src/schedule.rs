//! Schedules: a cron expression, its time zone and what a firing does, on a
//! task. Plain logic: when the next firing is, and how a late daemon catches
//! up (one firing for any number of missed slots, never one per slot).
use std::str::FromStr;

use chrono::{DateTime, TimeZone, Utc};

use super::Error;

/// What a firing does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// A completed plain task goes back to pending: a recurring chore.
    Reopen,
    /// The endpoints of a phase task's spec are asked whether they answer;
    /// the answers are recorded.
    Probe,
    /// A running generation is held while the server is measured again at
    /// its level, as its feasibility task measured it; the figures are
    /// recorded and the run's drift check is held against them.
    Remeasure,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Reopen => "reopen",
            Action::Probe => "probe",
            Action::Remeasure => "remeasure",
        }
    }

    /// What the action does, for a refusal that says so.
    pub fn purpose(self) -> &'static str {
        match self {
            Action::Reopen => "reopens a completed plain task (a phase task is retried instead)",
            Action::Probe => "asks a task's endpoints whether they answer",
            Action::Remeasure => {
                "holds a running generation and measures its server again (set it on the \
                 generation a feasibility task vouches for)"
            }
        }
    }

    pub fn parse(field: &str, text: &str) -> Result<Action, Error> {
        match text {
            "reopen" => Ok(Action::Reopen),
            "probe" => Ok(Action::Probe),
            "remeasure" => Ok(Action::Remeasure),
            other => Err(Error::invalid(
                field,
                format!("{other:?} is not an action; use reopen, probe or remeasure"),
            )),
        }
    }
}

/// A checked schedule.
#[derive(Debug, Clone)]
pub struct Schedule {
    /// As the client gave it (5 fields, or 6 with seconds first).
    pub cron: String,
    /// An IANA zone name ("Europe/Berlin") or "UTC".
    pub timezone: String,
    pub action: Action,
    parsed: cron::Schedule,
    zone: chrono_tz::Tz,
}

impl PartialEq for Schedule {
    fn eq(&self, other: &Self) -> bool {
        self.cron == other.cron && self.timezone == other.timezone && self.action == other.action
    }
}

impl Schedule {
    /// Checks an expression in crontab's five fields (minute hour
    /// day-of-month month day-of-week), or six with seconds first, and a zone.
    pub fn parse(
        cron: &str,
        timezone: &str,
        action: Action,
        now_ms: i64,
    ) -> Result<Schedule, Error> {
        let cron = cron.trim();
        let fields = cron.split_whitespace().count();
        let full = match fields {
            5 => {
                let mut parts: Vec<&str> = cron.split_whitespace().collect();
                let weekdays = crontab_weekdays(parts[4])?;
                parts[4] = &weekdays;
                format!("0 {}", parts.join(" "))
            }
            6 => cron.to_string(),
            _ => {
                return Err(Error::invalid(
                    "cron",
                    format!(
                        "{cron:?} has {fields} fields; give five (minute hour day-of-month month \
                         day-of-week, e.g. \"*/15 * * * *\") or six with seconds first"
                    ),
                ))
            }
        };
        let parsed = cron::Schedule::from_str(&full).map_err(|e| {
            Error::invalid("cron", format!("{cron:?} is not a cron expression: {e}"))
        })?;
        let timezone = if timezone.is_empty() { "UTC" } else { timezone };
        let zone = chrono_tz::Tz::from_str(timezone).map_err(|_| {
            Error::invalid(
                "timezone",
                format!("{timezone:?} is not a time zone; use an IANA name such as Europe/Berlin, or UTC"),
            )
        })?;
        let schedule = Schedule {
            cron: cron.to_string(),
            timezone: timezone.to_string(),
            action,
            parsed,
            zone,
        };
        // An expression that never fires again (a date in the past) is a
        // mistake, not a schedule.
        if schedule.next_after(now_ms).is_none() {
            return Err(Error::invalid("cron", format!("{cron:?} never fires")));
        }
        Ok(schedule)
    }

    /// The first firing strictly after `after_ms` (Unix milliseconds), in
    /// Unix milliseconds.
    pub fn next_after(&self, after_ms: i64) -> Option<i64> {
        let after: DateTime<Utc> = Utc.timestamp_millis_opt(after_ms).single()?;
        let local = after.with_timezone(&self.zone);
        self.parsed
            .after(&local)
            .next()
            .map(|t| t.with_timezone(&Utc).timestamp_millis())
    }

    /// A firing that is due at `now_ms`: the slot it stands for (the latest
    /// one passed), how many slots it covers, and the next slot after now.
    /// `None` when nothing is due yet.
    pub fn due(&self, next_fire_ms: i64, now_ms: i64) -> Option<Firing> {
        if next_fire_ms > now_ms {
            return None;
        }
        let mut slot = next_fire_ms;
        let mut slots = 1u64;
        // Count the missed slots, up to a bound: a schedule of every second
        // missed for a week is still one firing.
        while let Some(next) = self.next_after(slot) {
            if next > now_ms || slots >= 10_000 {
                break;
            }
            slot = next;
            slots += 1;
        }
        Some(Firing {
            slot_ms: slot,
            slots,
            next_ms: self.next_after(now_ms),
        })
    }
}

/// crontab's day-of-week numbers (0-7, 0 and 7 Sunday) in the `cron`
/// crate's (1-7, 1 Sunday); names (Mon-Fri) are the same in both.
fn crontab_weekdays(field: &str) -> Result<String, Error> {
    let refuse = |why: &str| Error::invalid("cron", format!("day of week {field:?}: {why}"));
    let day = |text: &str| -> Result<String, Error> {
        match text.parse::<u32>() {
            Ok(n @ 0..=7) => Ok(((n % 7) + 1).to_string()),
            Ok(_) => Err(refuse("numbers are 0-7 (0 and 7 are Sunday)")),
            Err(_) => Ok(text.to_string()),
        }
    };
    // Every day, in crontab's numbers.
    if field == "0-7" || field == "0-6" || field == "1-7" {
        return Ok("*".to_string());
    }
    let mut items = Vec::new();
    for item in field.split(',') {
        let (range, step) = match item.split_once('/') {
            Some((r, s)) => (r, Some(s)),
            None => (item, None),
        };
        let mapped = match range.split_once('-') {
            None if range == "*" || range == "?" => range.to_string(),
            None => day(range)?,
            // Up to 7 is up to Sunday: the week wraps, so it is Saturday's
            // end plus Sunday.
            Some((a, "7")) if step.is_none() && a != "0" && a != "7" => {
                items.push("1".to_string());
                format!("{}-7", day(a)?)
            }
            Some((_, "7")) if step.is_some() => {
                return Err(refuse(
                    "a stepped range ending on 7; write it with names (Mon-Sun)",
                ))
            }
            Some((a, b)) => format!("{}-{}", day(a)?, day(b)?),
        };
        items.push(match step {
            Some(step) => format!("{mapped}/{step}"),
            None => mapped,
        });
    }
    Ok(items.join(","))
}

/// One firing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Firing {
    /// The latest slot it stands for.
    pub slot_ms: i64,
    /// Slots it covers: more than one when the daemon was down for some.
    pub slots: u64,
    /// The next slot after now.
    pub next_ms: Option<i64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: i64 = 60_000;
    // 2026-12-01T00:00:00Z
    const MIDNIGHT: i64 = 1_796_083_200_000;

    fn every(cron: &str) -> Schedule {
        Schedule::parse(cron, "UTC", Action::Reopen, MIDNIGHT).unwrap()
    }

    #[test]
    fn five_fields_are_crontab_and_six_have_seconds() {
        let s = every("*/15 * * * *");
        assert_eq!(s.next_after(MIDNIGHT), Some(MIDNIGHT + 15 * MINUTE));
        let s = every("30 * * * * *");
        assert_eq!(s.next_after(MIDNIGHT), Some(MIDNIGHT + 30_000));
    }

    #[test]
    fn bad_expressions_and_zones_are_refused_with_the_reason() {
        for (cron, tz, field) in [
            ("* * *", "UTC", "cron"),
            ("61 * * * *", "UTC", "cron"),
            ("every hour", "UTC", "cron"),
            ("* * * * *", "Mars/Olympus", "timezone"),
            ("0 0 1 1 * 2001", "UTC", "cron"),
        ] {
            match Schedule::parse(cron, tz, Action::Reopen, MIDNIGHT) {
                Err(Error::Invalid { field: f, reason }) => {
                    assert_eq!(f, field, "{cron} {tz}: {reason}");
                    assert!(!reason.is_empty());
                }
                other => panic!("{cron} {tz}: {other:?}"),
            }
        }
        assert!(Action::parse("action", "explode").is_err());
    }

    #[test]
    fn weekdays_are_numbered_as_crontab_numbers_them() {
        // 2026-12-01 is a Tuesday; the next Monday 09:00 is the 7th, the
        // next Sunday the 6th.
        const MONDAY_9: i64 = 1_796_634_000_000;
        const SUNDAY_9: i64 = 1_796_547_600_000;
        assert_eq!(every("0 9 * * 1").next_after(MIDNIGHT), Some(MONDAY_9));
        assert_eq!(every("0 9 * * Mon").next_after(MIDNIGHT), Some(MONDAY_9));
        assert_eq!(every("0 9 * * 0").next_after(MIDNIGHT), Some(SUNDAY_9));
        assert_eq!(every("0 9 * * 7").next_after(MIDNIGHT), Some(SUNDAY_9));
        // Friday to Sunday, from Saturday 10:00: Sunday.
        let saturday_10 = SUNDAY_9 - 23 * 60 * MINUTE;
        assert_eq!(every("0 9 * * 5-7").next_after(saturday_10), Some(SUNDAY_9));
        // Monday to Friday from a Saturday: Monday.
        let saturday = SUNDAY_9 - 24 * 60 * MINUTE;
        assert_eq!(every("0 9 * * 1-5").next_after(saturday), Some(MONDAY_9));
        assert!(Schedule::parse("0 9 * * 8", "UTC", Action::Reopen, MIDNIGHT).is_err());
        // Every day, however crontab spells it.
        for all in ["0-7", "0-6", "1-7", "*"] {
            let s = every(&format!("0 9 * * {all}"));
            assert_eq!(
                s.next_after(MIDNIGHT),
                Some(MIDNIGHT + 9 * 60 * MINUTE),
                "{all}"
            );
        }
    }

    #[test]
    fn a_zone_moves_the_wall_clock() {
        // 09:00 in Berlin is 08:00 UTC in December.
        let s = Schedule::parse("0 9 * * *", "Europe/Berlin", Action::Reopen, MIDNIGHT).unwrap();
        assert_eq!(s.next_after(MIDNIGHT), Some(MIDNIGHT + 8 * 60 * MINUTE));
    }

    #[test]
    fn missed_slots_fire_once() {
        let s = every("*/5 * * * *");
        let first = MIDNIGHT + 5 * MINUTE;
        assert_eq!(s.due(first, first - 1), None);
        let on_time = s.due(first, first).unwrap();
        assert_eq!((on_time.slot_ms, on_time.slots), (first, 1));
        assert_eq!(on_time.next_ms, Some(first + 5 * MINUTE));
        // Down for an hour: one firing standing for twelve slots.
        let late = s.due(first, first + 60 * MINUTE + 1).unwrap();
        assert_eq!(late.slots, 13);
        assert_eq!(late.slot_ms, first + 60 * MINUTE);
        assert_eq!(late.next_ms, Some(first + 65 * MINUTE));
    }
}
