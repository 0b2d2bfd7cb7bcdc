//! Value types of the coordination seam: roles, members, fencing tokens, keys and records.

use std::fmt;
use std::str::FromStr;

/// Longest role name in bytes.
pub const MAX_ROLE_LEN: usize = 249;
/// Longest member id in bytes.
pub const MAX_MEMBER_ID_LEN: usize = 249;

/// Why a coordination value or record is malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// Bytes that do not follow the wire format.
    #[error("malformed {part}: {message}")]
    Format {
        /// The part of the record at fault.
        part: &'static str,
        /// What is wrong.
        message: String,
    },
    /// An empty role or member id.
    #[error("{field} must not be empty")]
    Empty {
        /// The field.
        field: &'static str,
    },
    /// A role or member id longer than its bound.
    #[error("{field} is {length} bytes, longer than {bound}")]
    TooLong {
        /// The field.
        field: &'static str,
        /// Its length.
        length: usize,
        /// The bound.
        bound: usize,
    },
    /// A fencing token with a negative part.
    #[error("fencing token {producer_id}:{producer_epoch} has a negative part")]
    NegativeFencingToken {
        /// Producer id.
        producer_id: i64,
        /// Producer epoch.
        producer_epoch: i16,
    },
    /// A fencing token string that is not `id:epoch`.
    #[error("{text:?} is not a fencing token of the form id:epoch")]
    FencingTokenForm {
        /// The text.
        text: String,
    },
}

fn bounded(field: &'static str, value: &str, bound: usize) -> Result<(), RecordError> {
    if value.is_empty() {
        return Err(RecordError::Empty { field });
    }
    if value.len() > bound {
        return Err(RecordError::TooLong {
            field,
            length: value.len(),
            bound,
        });
    }
    Ok(())
}

/// A bounded, non-empty name newtype with `new`, `as_str` and `Display`.
macro_rules! bounded_name {
    ($(#[$doc:meta])* $name:ident, $field:literal, $bound:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(String);

        impl $name {
            #[doc = concat!("A ", $field, " named `name` (1 to ", stringify!($bound), " bytes).")]
            pub fn new(name: &str) -> Result<Self, RecordError> {
                bounded($field, name, $bound)?;
                Ok($name(name.to_string()))
            }

            #[doc = concat!("The ", $field, " as text.")]
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

bounded_name!(
    /// A coordinated role: the unit of leadership (1 to 249 bytes).
    Role,
    "role",
    MAX_ROLE_LEN
);

bounded_name!(
    /// A member that may hold roles (1 to 249 bytes).
    MemberId,
    "member id",
    MAX_MEMBER_ID_LEN
);

/// The authority of a role holder: a producer id and its epoch.
///
/// Tokens order on the producer id first, then the epoch: when an epoch would overflow, a new,
/// larger producer id starts again at epoch 0, so never compare epochs alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FencingToken {
    producer_id: i64,
    producer_epoch: i16,
}

impl FencingToken {
    /// A token; both parts must be non-negative.
    pub fn new(producer_id: i64, producer_epoch: i16) -> Result<Self, RecordError> {
        if producer_id < 0 || producer_epoch < 0 {
            return Err(RecordError::NegativeFencingToken {
                producer_id,
                producer_epoch,
            });
        }
        Ok(FencingToken {
            producer_id,
            producer_epoch,
        })
    }

    /// The producer id.
    pub fn producer_id(&self) -> i64 {
        self.producer_id
    }

    /// The producer epoch.
    pub fn producer_epoch(&self) -> i16 {
        self.producer_epoch
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.producer_id, self.producer_epoch)
    }
}

impl FromStr for FencingToken {
    type Err = RecordError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let form = || RecordError::FencingTokenForm {
            text: text.to_string(),
        };
        let (id, epoch) = text.split_once(':').ok_or_else(form)?;
        if epoch.contains(':') {
            return Err(form());
        }
        let id: i64 = id.parse().map_err(|_| form())?;
        let epoch: i16 = epoch.parse().map_err(|_| form())?;
        FencingToken::new(id, epoch)
    }
}

/// The two kinds of records of a role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecordKind {
    /// A member's registration (its offset is the join sequence).
    Registration,
    /// The role's lease.
    Lease,
}

impl RecordKind {
    /// Wire code of the kind.
    pub fn code(self) -> i16 {
        match self {
            RecordKind::Registration => 0,
            RecordKind::Lease => 1,
        }
    }

    /// The kind of a wire code.
    pub fn from_code(code: i16) -> Option<Self> {
        match code {
            0 => Some(RecordKind::Registration),
            1 => Some(RecordKind::Lease),
            _ => None,
        }
    }
}

/// The key of a coordination record.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CoordinationKey {
    /// Registration or lease.
    pub kind: RecordKind,
    /// The role the record belongs to.
    pub role: Role,
    /// The registered member (registrations only).
    pub member: Option<MemberId>,
}

impl CoordinationKey {
    /// Key of `member`'s registration for `role`.
    pub fn registration(role: Role, member: MemberId) -> Self {
        Self {
            kind: RecordKind::Registration,
            role,
            member: Some(member),
        }
    }

    /// Key of `role`'s lease.
    pub fn lease(role: Role) -> Self {
        Self {
            kind: RecordKind::Lease,
            role,
            member: None,
        }
    }
}

/// A member's registration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    /// The member.
    pub member: MemberId,
    /// Wall-clock milliseconds since the Unix epoch.
    pub registered_at: i64,
}

/// A lease on a role, written under the holder's token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The holder.
    pub member: MemberId,
    /// The holder's authority.
    pub token: FencingToken,
    /// When the lease was granted (ms since the Unix epoch).
    pub granted_at: i64,
    /// Until when standbys wait before challenging (ms since the Unix epoch); not an authority.
    pub deadline: i64,
}

/// The value of a coordination record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CoordinationRecord {
    /// A registration.
    Registration(Registration),
    /// A lease.
    Lease(Lease),
    /// A null value: deregisters a member or clears a lease.
    Tombstone,
}

/// Records of one role: `(offset, key, value)` in offset order.
pub type RoleRecords = Vec<(i64, CoordinationKey, CoordinationRecord)>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_order_on_the_producer_id_first_and_round_trip_as_text() {
        let a = FencingToken::new(1, i16::MAX).unwrap();
        let b = FencingToken::new(2, 0).unwrap();
        assert!(a < b);
        assert_eq!(
            "7:3".parse::<FencingToken>(),
            Ok(FencingToken::new(7, 3).unwrap())
        );
        assert_eq!(b.to_string().parse::<FencingToken>(), Ok(b));
        for bad in ["", "1", "1:2:3", "a:1", "1:b", "-1:0", "1:-1", "1:40000"] {
            assert!(bad.parse::<FencingToken>().is_err(), "{bad}");
        }
        assert!(FencingToken::new(-1, 0).is_err());
    }

    #[test]
    fn names_are_bounded() {
        assert!(Role::new("").is_err());
        assert!(Role::new(&"r".repeat(249)).is_ok());
        assert!(matches!(
            Role::new(&"r".repeat(250)),
            Err(RecordError::TooLong { length: 250, .. })
        ));
        assert_eq!(
            MemberId::new(""),
            Err(RecordError::Empty { field: "member id" })
        );
        assert_eq!(
            MemberId::new(&"m".repeat(250)).map_err(|e| e.to_string()),
            Err("member id is 250 bytes, longer than 249".to_string())
        );
    }
}
