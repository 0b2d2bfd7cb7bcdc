//! The wire format of coordination records (format/COORDINATION.md, version 0).
//!
//! Keys and values of registrations and leases follow the frozen format the seam's defining
//! implementation shares with its ports: big-endian signed integers, strings as an `i16` byte
//! length then UTF-8. Strata adds one record kind of its own, the epoch record (kind 2), which
//! makes minted epochs durable; readers of the seam's kinds skip it like any unknown key.

use bytes::{BufMut, Bytes, BytesMut};

use super::record::{
    CoordinationKey, CoordinationRecord, FencingToken, Lease, MemberId, RecordError, RecordKind,
    Registration, Role,
};

/// Format version written in every key and value.
pub const WIRE_VERSION: i16 = 0;
/// Kind code of Strata's epoch records.
pub const EPOCH_KIND: i16 = 2;

fn format(part: &'static str, message: impl Into<String>) -> RecordError {
    RecordError::Format {
        part,
        message: message.into(),
    }
}

fn put_string(out: &mut BytesMut, s: &str) {
    out.put_i16(s.len() as i16);
    out.put_slice(s.as_bytes());
}

struct Reader<'a> {
    buf: &'a [u8],
    part: &'static str,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], RecordError> {
        if self.buf.len() < n {
            return Err(format(self.part, "truncated"));
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    fn i16(&mut self) -> Result<i16, RecordError> {
        let b = self.take(2)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }

    fn i64(&mut self) -> Result<i64, RecordError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(i64::from_be_bytes(a))
    }

    fn string(&mut self) -> Result<&'a str, RecordError> {
        let len = self.i16()?;
        if len < 0 {
            return Err(format(self.part, "negative string length"));
        }
        let bytes = self.take(len as usize)?;
        std::str::from_utf8(bytes).map_err(|_| format(self.part, "string is not UTF-8"))
    }

    fn version(&mut self) -> Result<(), RecordError> {
        match self.i16()? {
            WIRE_VERSION => Ok(()),
            v => Err(format(self.part, format!("unknown version {v}"))),
        }
    }

    fn finish(&self) -> Result<(), RecordError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(format(self.part, "trailing bytes"))
        }
    }
}

fn encode_raw_key(kind: i16, role: &Role, member: &str) -> Bytes {
    let mut out = BytesMut::with_capacity(8 + role.as_str().len() + member.len());
    out.put_i16(WIRE_VERSION);
    out.put_i16(kind);
    put_string(&mut out, role.as_str());
    put_string(&mut out, member);
    out.freeze()
}

/// Encodes a record key. A lease key has an empty member whatever member the caller set (as the
/// upstream codec writes it), so every lease key of a role is the same key.
pub fn encode_key(key: &CoordinationKey) -> Bytes {
    let member = match key.kind {
        RecordKind::Lease => "",
        RecordKind::Registration => key.member.as_ref().map_or("", MemberId::as_str),
    };
    encode_raw_key(key.kind.code(), &key.role, member)
}

/// Decodes the kind code, role and member string of any key, Strata's epoch kind included.
fn decode_raw_key(buf: &[u8]) -> Result<(i16, Role, &str), RecordError> {
    let mut r = Reader { buf, part: "key" };
    r.version()?;
    let kind = r.i16()?;
    let role = Role::new(r.string()?)?;
    let member = r.string()?;
    r.finish()?;
    Ok((kind, role, member))
}

/// Decodes a record key of the seam's kinds (registration, lease).
pub fn decode_key(buf: &[u8]) -> Result<CoordinationKey, RecordError> {
    let (code, role, member) = decode_raw_key(buf)?;
    let kind =
        RecordKind::from_code(code).ok_or_else(|| format("key", format!("unknown kind {code}")))?;
    let member = match (kind, member.is_empty()) {
        (RecordKind::Lease, true) => None,
        (RecordKind::Lease, false) => return Err(format("key", "a lease key carries no member")),
        (RecordKind::Registration, _) => Some(MemberId::new(member)?),
    };
    Ok(CoordinationKey { kind, role, member })
}

/// Encodes a record value; `None` for a tombstone.
pub fn encode_value(record: &CoordinationRecord) -> Option<Bytes> {
    let mut out = BytesMut::new();
    match record {
        CoordinationRecord::Registration(r) => {
            out.put_i16(WIRE_VERSION);
            put_string(&mut out, r.member.as_str());
            out.put_i64(r.registered_at);
        }
        CoordinationRecord::Lease(l) => {
            out.put_i16(WIRE_VERSION);
            put_string(&mut out, l.member.as_str());
            out.put_i64(l.token.producer_id());
            out.put_i16(l.token.producer_epoch());
            out.put_i64(l.granted_at);
            out.put_i64(l.deadline);
        }
        CoordinationRecord::Tombstone => return None,
    }
    Some(out.freeze())
}

/// Decodes the value of a record of `kind`; `None` is a tombstone.
pub fn decode_value(
    kind: RecordKind,
    value: Option<&[u8]>,
) -> Result<CoordinationRecord, RecordError> {
    let Some(buf) = value else {
        return Ok(CoordinationRecord::Tombstone);
    };
    let mut r = Reader { buf, part: "value" };
    r.version()?;
    let member = MemberId::new(r.string()?)?;
    let record = match kind {
        RecordKind::Registration => CoordinationRecord::Registration(Registration {
            member,
            registered_at: r.i64()?,
        }),
        RecordKind::Lease => {
            let producer_id = r.i64()?;
            let producer_epoch = r.i16()?;
            CoordinationRecord::Lease(Lease {
                member,
                token: FencingToken::new(producer_id, producer_epoch)?,
                granted_at: r.i64()?,
                deadline: r.i64()?,
            })
        }
    };
    r.finish()?;
    Ok(record)
}

/// Key of the epoch record of `role` (Strata's kind 2, empty member).
pub fn encode_epoch_key(role: &Role) -> Bytes {
    encode_raw_key(EPOCH_KIND, role, "")
}

/// Value of an epoch record: version, producer id, producer epoch.
pub fn encode_epoch_value(token: FencingToken) -> Bytes {
    let mut out = BytesMut::with_capacity(12);
    out.put_i16(WIRE_VERSION);
    out.put_i64(token.producer_id());
    out.put_i16(token.producer_epoch());
    out.freeze()
}

/// Decodes an epoch record; `Ok(None)` when the key is not an epoch key.
pub fn decode_epoch(
    key: &[u8],
    value: Option<&[u8]>,
) -> Result<Option<(Role, FencingToken)>, RecordError> {
    let Ok((EPOCH_KIND, role, member)) = decode_raw_key(key) else {
        return Ok(None);
    };
    if !member.is_empty() {
        return Err(format("key", "an epoch key carries no member"));
    }
    let buf = value.ok_or_else(|| format("value", "an epoch record has a value"))?;
    let mut r = Reader { buf, part: "value" };
    r.version()?;
    let token = FencingToken::new(r.i64()?, r.i16()?)?;
    r.finish()?;
    Ok(Some((role, token)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn role(s: &str) -> Role {
        Role::new(s).unwrap()
    }

    #[test]
    fn keys_and_values_round_trip() {
        let member = MemberId::new("m-1").unwrap();
        for key in [
            CoordinationKey::registration(role("r"), member.clone()),
            CoordinationKey::lease(role("r")),
        ] {
            assert_eq!(decode_key(&encode_key(&key)), Ok(key));
        }
        let lease = CoordinationRecord::Lease(Lease {
            member: member.clone(),
            token: FencingToken::new(9, 2).unwrap(),
            granted_at: 5,
            deadline: 6,
        });
        let bytes = encode_value(&lease).unwrap();
        assert_eq!(decode_value(RecordKind::Lease, Some(&bytes)), Ok(lease));
        assert_eq!(
            decode_value(RecordKind::Lease, None),
            Ok(CoordinationRecord::Tombstone)
        );
        let token = FencingToken::new(3, 4).unwrap();
        let epoch = decode_epoch(
            &encode_epoch_key(&role("r")),
            Some(&encode_epoch_value(token)),
        );
        assert_eq!(epoch, Ok(Some((role("r"), token))));
        assert_eq!(
            decode_epoch(&encode_key(&CoordinationKey::lease(role("r"))), None),
            Ok(None)
        );
    }

    #[test]
    fn malformed_bytes_are_errors() {
        let key = encode_key(&CoordinationKey::lease(role("r")));
        for cut in 0..key.len() {
            assert!(decode_key(&key[..cut]).is_err());
        }
        let mut trailing = key.to_vec();
        trailing.push(0);
        assert!(decode_key(&trailing).is_err());
        let lease_with_member = encode_raw_key(1, &role("r"), "m");
        assert!(decode_key(&lease_with_member).is_err());
        // A lease key the caller built with a member still encodes (and decodes) as the role's
        // one lease key.
        let mut with_member = CoordinationKey::lease(role("r"));
        with_member.member = Some(MemberId::new("m").unwrap());
        let encoded = encode_key(&with_member);
        assert_eq!(encoded, encode_key(&CoordinationKey::lease(role("r"))));
        assert_eq!(
            decode_key(&encoded).unwrap(),
            CoordinationKey::lease(role("r"))
        );
        assert!(decode_key(&encode_raw_key(7, &role("r"), "")).is_err());
        let mut bad_version = key.to_vec();
        bad_version[1] = 1;
        assert!(decode_key(&bad_version).is_err());
        assert!(
            decode_key(&[0, 0, 0, 1, 0xff, 0xff]).is_err(),
            "negative length"
        );
        assert!(
            decode_value(RecordKind::Registration, Some(&[0, 0, 0, 1, 0xc3])).is_err(),
            "not UTF-8"
        );
    }
}
