//! A fixed clock for `strftime_now`, so a rendered template does not depend on when it runs.

use std::fmt::Write as _;

use serde::Serialize;

/// A fixed UTC date and time that `strftime_now(fmt)` formats.
///
/// ```
/// use prompt_template_probe::Clock;
/// let clock = Clock::default();
/// assert_eq!(clock.strftime("%Y-%m-%d"), "2026-11-30");
/// assert_eq!(clock.strftime("%d %b %Y"), "30 Nov 2026");
/// assert_eq!(clock.strftime("%A %B %-d, %H:%M:%S"), "Monday November 30, 12:00:00");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Clock {
    /// Year (proleptic Gregorian).
    pub year: i32,
    /// Month, 1–12.
    pub month: u8,
    /// Day of the month, 1–31.
    pub day: u8,
    /// Hour, 0–23.
    pub hour: u8,
    /// Minute, 0–59.
    pub minute: u8,
    /// Second, 0–59.
    pub second: u8,
}

impl Default for Clock {
    /// 2026-11-30 12:00:00 UTC.
    fn default() -> Self {
        Self {
            year: 2026,
            month: 11,
            day: 30,
            hour: 12,
            minute: 0,
            second: 0,
        }
    }
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const WEEKDAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

impl Clock {
    /// Another fixed instant that differs from this one in every date field (year, month, day,
    /// weekday, hour, minute, second): rendering with both tells whether a template depends on
    /// the current date.
    pub fn shifted(&self) -> Self {
        Self {
            year: self.year.saturating_add(1),
            month: self.month % 12 + 1,
            day: if self.day == 1 { 2 } else { 1 },
            hour: (self.hour + 1) % 24,
            minute: (self.minute + 1) % 60,
            second: (self.second + 1) % 60,
        }
    }

    /// Days since 1970-01-01 (Howard Hinnant's `days_from_civil`).
    fn days_since_epoch(&self) -> i64 {
        prompt_core::calendar::days_from_civil(
            i64::from(self.year),
            i64::from(self.month),
            i64::from(self.day),
        )
    }

    /// 0 = Monday … 6 = Sunday.
    fn weekday(&self) -> usize {
        // 1970-01-01 was a Thursday (index 3).
        (self.days_since_epoch() + 3).rem_euclid(7) as usize
    }

    fn is_leap(&self) -> bool {
        let y = self.year;
        (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
    }

    fn day_of_year(&self) -> u16 {
        const BEFORE: [u16; 12] = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
        let m = usize::from(self.month.clamp(1, 12)) - 1;
        BEFORE[m] + u16::from(self.day) + u16::from(m >= 2 && self.is_leap())
    }

    /// Formats like Python's `datetime.strftime` (C locale) for the common directives:
    /// `%Y %y %m %d %e %j %H %I %M %S %p %b %h %B %a %A %F %T %D %Z %z %%`, with the glibc
    /// `-` flag (`%-d`) to drop padding. Unknown directives are kept as written.
    pub fn strftime(&self, fmt: &str) -> String {
        let mut out = String::with_capacity(fmt.len() + 16);
        let mut chars = fmt.chars();
        let month = MONTHS[usize::from(self.month.clamp(1, 12)) - 1];
        let weekday = WEEKDAYS[self.weekday()];
        while let Some(c) = chars.next() {
            if c != '%' {
                out.push(c);
                continue;
            }
            let Some(mut d) = chars.next() else {
                out.push('%');
                break;
            };
            let unpadded = d == '-';
            if unpadded {
                match chars.next() {
                    Some(next) => d = next,
                    None => {
                        out.push_str("%-");
                        break;
                    }
                }
            }
            let num = |out: &mut String, v: u32, width: usize| {
                let _ = if unpadded {
                    write!(out, "{v}")
                } else {
                    write!(out, "{v:0width$}")
                };
            };
            let hour12 = match self.hour % 12 {
                0 => 12,
                h => h,
            };
            match d {
                'Y' => {
                    let _ = write!(out, "{}", self.year);
                }
                'y' => num(&mut out, self.year.rem_euclid(100) as u32, 2),
                'm' => num(&mut out, u32::from(self.month), 2),
                'd' => num(&mut out, u32::from(self.day), 2),
                'e' => {
                    let _ = if unpadded {
                        write!(out, "{}", self.day)
                    } else {
                        write!(out, "{:>2}", self.day)
                    };
                }
                'j' => num(&mut out, u32::from(self.day_of_year()), 3),
                'H' => num(&mut out, u32::from(self.hour), 2),
                'I' => num(&mut out, u32::from(hour12), 2),
                'M' => num(&mut out, u32::from(self.minute), 2),
                'S' => num(&mut out, u32::from(self.second), 2),
                'p' => out.push_str(if self.hour < 12 { "AM" } else { "PM" }),
                'b' | 'h' => out.push_str(&month[..3]),
                'B' => out.push_str(month),
                'a' => out.push_str(&weekday[..3]),
                'A' => out.push_str(weekday),
                'F' => out.push_str(&self.strftime("%Y-%m-%d")),
                'T' => out.push_str(&self.strftime("%H:%M:%S")),
                'D' => out.push_str(&self.strftime("%m/%d/%y")),
                'Z' => out.push_str("UTC"),
                'z' => out.push_str("+0000"),
                '%' => out.push('%'),
                other => {
                    out.push('%');
                    if unpadded {
                        out.push('-');
                    }
                    out.push(other);
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weekdays_and_day_of_year() {
        let c = Clock::default();
        assert_eq!(c.strftime("%a %j"), "Mon 334");
        let leap = Clock {
            year: 2024,
            month: 3,
            day: 1,
            ..Clock::default()
        };
        assert_eq!(leap.strftime("%A %j %e|%-m|%y"), "Friday 061  1|3|24");
        let shifted = c.shifted();
        assert_eq!(shifted.strftime("%F %T"), "2027-12-01 13:01:01");
        assert_eq!(c.strftime("%Q %% %-"), "%Q % %-");
    }
}
