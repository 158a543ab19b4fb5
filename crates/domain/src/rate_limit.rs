//! An agent's rate limit: so many requests per second or per minute (`50/s`, `600/m`),
//! with a burst (by default one window's worth) that may arrive at once.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("rate limit {0:?} is not N/s or N/m with N from 1 to 1000000")]
pub struct InvalidRateLimit(pub String);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    count: u32,
    window: Window,
    burst: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Window {
    Second,
    Minute,
}

impl RateLimit {
    pub const MAX_COUNT: u32 = 1_000_000;

    /// `text` is `N/s` or `N/m`; `burst` defaults to N.
    pub fn parse(text: &str, burst: Option<u32>) -> Result<Self, InvalidRateLimit> {
        let invalid = || InvalidRateLimit(text.to_owned());
        let (count, window) = text.trim().split_once('/').ok_or_else(invalid)?;
        let count = u32::from_str(count).map_err(|_| invalid())?;
        let window = match window {
            "s" => Window::Second,
            "m" => Window::Minute,
            _ => return Err(invalid()),
        };
        if count == 0
            || count > Self::MAX_COUNT
            || burst.is_some_and(|b| b == 0 || b > Self::MAX_COUNT)
        {
            return Err(invalid());
        }
        Ok(Self {
            count,
            window,
            burst: burst.unwrap_or(count),
        })
    }

    /// The time in which one more request becomes allowed.
    pub fn replenish_interval(&self) -> Duration {
        let window = match self.window {
            Window::Second => Duration::from_secs(1),
            Window::Minute => Duration::from_secs(60),
        };
        window / self.count
    }

    pub fn burst(&self) -> u32 {
        self.burst
    }

    /// The window in seconds (for the `RateLimit-Policy` header's `w`).
    pub fn window_secs(&self) -> u32 {
        match self.window {
            Window::Second => 1,
            Window::Minute => 60,
        }
    }

    pub fn count(&self) -> u32 {
        self.count
    }
}

/// `50/s`, the form `parse` reads (the burst is stored beside it).
impl fmt::Display for RateLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let window = match self.window {
            Window::Second => "s",
            Window::Minute => "m",
        };
        write!(f, "{}/{window}", self.count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_per_second_and_minute_with_a_burst() {
        let limit = RateLimit::parse("50/s", None).unwrap();
        assert_eq!(limit.replenish_interval(), Duration::from_millis(20));
        assert_eq!(limit.burst(), 50);
        assert_eq!(limit.to_string(), "50/s");
        let slow = RateLimit::parse("6/m", Some(2)).unwrap();
        assert_eq!(slow.replenish_interval(), Duration::from_secs(10));
        assert_eq!((slow.burst(), slow.window_secs()), (2, 60));
        assert_eq!(RateLimit::parse(&slow.to_string(), Some(2)), Ok(slow));
    }

    #[test]
    fn nonsense_is_refused() {
        for bad in ["", "50", "50/h", "0/s", "-1/s", "x/s", "2000000/s", "5/ s"] {
            assert!(RateLimit::parse(bad, None).is_err(), "{bad:?}");
        }
        assert!(RateLimit::parse("5/s", Some(0)).is_err());
    }
}
