//! How long the cold tier waits on an object store: per connection, per request, retries, and
//! one deadline for a whole call. A group engine's methods take `&mut self`, so a cold call that
//! waits holds the group's appends and hot reads with it: the deadline bounds that wait.

use std::time::Duration;

use super::ColdError;

/// Timeouts and retries of every request to a remote cold store (S3-compatible or any
/// `object_store` backend). The local store does not use them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ColdTimeouts {
    /// Longest a connection may take to open. Default 2 s; 1 ms to 60 s.
    pub connect: Duration,
    /// Longest one request may take, from sending to the last byte of the answer. Default
    /// 10 s; 1 ms to 10 minutes.
    pub request: Duration,
    /// How often a failed or timed-out request is retried (with backoff). Default 3; 0 to 20.
    pub retries: usize,
    /// Longest one cold-store call may take, retries included; past it the call fails with
    /// [`ColdError::Timeout`] (the request may or may not have taken effect). Default 30 s;
    /// 1 ms to 10 minutes, and at least `request`.
    pub deadline: Duration,
}

/// Longest any of the durations may be.
const MAX_WAIT: Duration = Duration::from_secs(600);

impl Default for ColdTimeouts {
    fn default() -> Self {
        Self {
            connect: Duration::from_secs(2),
            request: Duration::from_secs(10),
            retries: 3,
            deadline: Duration::from_secs(30),
        }
    }
}

with_setters!(ColdTimeouts {
    with_connect => connect: Duration,
    with_request => request: Duration,
    with_retries => retries: usize,
    with_deadline => deadline: Duration,
});

impl ColdTimeouts {
    /// Checks the ranges documented on each field.
    pub fn validate(&self) -> Result<(), ColdError> {
        let in_range = |d: Duration, max: Duration| d >= Duration::from_millis(1) && d <= max;
        let problem = if !in_range(self.connect, Duration::from_secs(60)) {
            Some("connect timeout must be 1 ms to 60 s")
        } else if !in_range(self.request, MAX_WAIT) {
            Some("request timeout must be 1 ms to 10 minutes")
        } else if self.retries > 20 {
            Some("retries must be at most 20")
        } else if !in_range(self.deadline, MAX_WAIT) || self.deadline < self.request {
            Some("deadline must be 1 ms to 10 minutes and at least the request timeout")
        } else {
            None
        };
        match problem {
            Some(p) => Err(ColdError::Config(format!("{p}: {self:?}"))),
            None => Ok(()),
        }
    }

    /// These timeouts with any of the URL query parameters `connect_timeout_ms`,
    /// `request_timeout_ms`, `retries` and `deadline_ms` that `query` finds.
    #[cfg(feature = "s3")]
    pub(crate) fn with_query(
        mut self,
        query: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ColdError> {
        let number = |name: &str| -> Result<Option<u64>, ColdError> {
            query(name)
                .map(|v| {
                    v.parse::<u64>()
                        .map_err(|_| ColdError::Config(format!("{name}={v}: not a number")))
                })
                .transpose()
        };
        if let Some(ms) = number("connect_timeout_ms")? {
            self.connect = Duration::from_millis(ms);
        }
        if let Some(ms) = number("request_timeout_ms")? {
            self.request = Duration::from_millis(ms);
        }
        if let Some(n) = number("retries")? {
            self.retries = usize::try_from(n).unwrap_or(usize::MAX);
        }
        if let Some(ms) = number("deadline_ms")? {
            self.deadline = Duration::from_millis(ms);
        }
        self.validate()?;
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_ranges_are_checked() {
        assert!(ColdTimeouts::default().validate().is_ok());
        let bad = [
            ColdTimeouts::default().with_connect(Duration::ZERO),
            ColdTimeouts::default().with_request(Duration::from_secs(601)),
            ColdTimeouts::default().with_retries(21),
            ColdTimeouts::default().with_deadline(Duration::from_secs(5)),
        ];
        for t in bad {
            assert!(t.validate().is_err(), "{t:?}");
        }
    }

    #[test]
    #[cfg(feature = "s3")]
    fn url_parameters_override_the_defaults() {
        let query = |name: &str| match name {
            "request_timeout_ms" => Some("1500".to_string()),
            "retries" => Some("0".to_string()),
            "deadline_ms" => Some("2000".to_string()),
            _ => None,
        };
        let t = ColdTimeouts::default().with_query(query).unwrap();
        assert_eq!(t.request, Duration::from_millis(1500));
        assert_eq!(t.retries, 0);
        assert_eq!(t.deadline, Duration::from_millis(2000));
        assert_eq!(t.connect, Duration::from_secs(2));
        let bad = |name: &str| (name == "retries").then(|| "many".to_string());
        assert!(ColdTimeouts::default().with_query(bad).is_err());
    }
}
