//! An append request, checked and encoded whole before any byte of it is written: every item's
//! records split into batches (offsets relative to the item's first record; sealing stamps the
//! real base offset). A request that cannot be encoded is refused with nothing written.

use crate::error::{StoreError, StoreResult};
use crate::segment::{
    batch_spans, encode_unsealed, BatchHeader, Compression, EncodeError, NewRecord, Record,
};

/// Encoded records per batch when one item carries many records.
pub(crate) const TARGET_BATCH_BYTES: usize = 1 << 20;

/// Records to append, each item to its partition.
pub type Items = Vec<(u32, Vec<NewRecord>)>;

/// Offsets `(first, last)` assigned to one append item.
pub type OffsetRange = (i64, i64);

/// Seals one batch of a partition at its next offset and copies it out.
pub(crate) type BatchWriter<'a> =
    dyn FnMut(u32, &mut [u8], &mut BatchHeader) -> StoreResult<()> + 'a;

/// One encoded batch of a request, not yet sealed.
pub(crate) struct EncodedBatch {
    /// Partition it goes to.
    pub partition: u32,
    /// Byte range of the batch in [`EncodedRequest::bytes`].
    pub range: std::ops::Range<usize>,
    /// Its header (base offset relative; sealing fixes it).
    pub header: BatchHeader,
    /// Index of the item it belongs to.
    pub item: usize,
}

/// A whole request, encoded.
pub(crate) struct EncodedRequest {
    /// Every batch's bytes, back to back.
    pub bytes: Vec<u8>,
    /// The batches, in write order.
    pub batches: Vec<EncodedBatch>,
    /// Number of items.
    pub items: usize,
}

/// The room a request needs, without its bytes: what making room for it ahead takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Footprint {
    /// Bytes per partition, sorted by partition.
    pub partitions: Vec<(u32, u64)>,
    /// Bytes of its journal frames.
    pub frames: u64,
}

impl EncodedRequest {
    /// Records in the request.
    pub fn records(&self) -> u64 {
        self.batches
            .iter()
            .map(|b| u64::from(b.header.record_count))
            .sum()
    }

    /// Bytes this request adds to `partition`.
    pub fn bytes_for(&self, partition: u32) -> u64 {
        self.batches
            .iter()
            .filter(|b| b.partition == partition)
            .map(|b| b.range.len() as u64)
            .sum()
    }

    /// Bytes the request's journal frames take.
    pub fn frame_bytes(&self) -> u64 {
        self.batches
            .iter()
            .map(|b| (super::journal::FRAME_HEADER_LEN + b.range.len()) as u64)
            .sum()
    }

    /// The room the request needs: bytes per partition (sorted by partition) and journal bytes.
    pub fn footprint(&self) -> Footprint {
        Footprint {
            partitions: self
                .sorted_partitions()
                .into_iter()
                .map(|id| (id, self.bytes_for(id)))
                .collect(),
            frames: self.frame_bytes(),
        }
    }

    /// Hands every batch, in order, to `write` (which seals it at its partition's next offset
    /// and copies it out); returns each item's offset range.
    pub fn write(&mut self, write: &mut BatchWriter<'_>) -> StoreResult<Vec<OffsetRange>> {
        let mut ranges: Vec<Option<OffsetRange>> = vec![None; self.items];
        for batch in &mut self.batches {
            write(
                batch.partition,
                &mut self.bytes[batch.range.clone()],
                &mut batch.header,
            )?;
            let last = batch.header.last_offset();
            let range = &mut ranges[batch.item];
            let first = range.map_or(batch.header.base_offset, |(first, _)| first);
            *range = Some((first, last));
        }
        ranges
            .into_iter()
            .map(|r| r.ok_or(StoreError::Invalid("an append item wrote no batch".into())))
            .collect()
    }

    /// The distinct partitions the request touches, sorted (the order their locks are taken).
    pub fn sorted_partitions(&self) -> Vec<u32> {
        let mut out: Vec<u32> = self.batches.iter().map(|b| b.partition).collect();
        out.sort_unstable();
        out.dedup();
        out
    }
}

/// Checks items before anything is written: partitions in range, records non-empty and valid.
pub(crate) fn check_items(items: &Items, partitions: u32) -> StoreResult<()> {
    for (partition, records) in items {
        if *partition >= partitions {
            return Err(StoreError::PartitionOutOfRange {
                partition: *partition as i32,
                count: partitions as i32,
            });
        }
        if records.is_empty() {
            return Err(StoreError::Encode(EncodeError::Empty));
        }
        if records.iter().any(|r| r.key.is_none() && r.value.is_none()) {
            return Err(StoreError::Encode(EncodeError::UnkeyedTombstone));
        }
    }
    Ok(())
}

/// Encodes every item of `items` (already checked) with `compression`.
pub(crate) fn encode_request(
    items: Items,
    compression: Compression,
) -> StoreResult<EncodedRequest> {
    let mut request = EncodedRequest {
        bytes: Vec::new(),
        batches: Vec::new(),
        items: items.len(),
    };
    for (item, (partition, records)) in items.into_iter().enumerate() {
        let records: Vec<Record> = records
            .into_iter()
            .enumerate()
            .map(|(i, r)| r.at(i as i64))
            .collect();
        for span in batch_spans(&records, TARGET_BATCH_BYTES) {
            let start = request.bytes.len();
            let header = encode_unsealed(span, compression, &mut request.bytes)?;
            request.batches.push(EncodedBatch {
                partition,
                range: start..request.bytes.len(),
                header,
                item,
            });
        }
    }
    // Every batch but a partition's last one says another of the same append follows.
    let mut seen: Vec<u32> = Vec::new();
    for batch in request.batches.iter_mut().rev() {
        batch.header.continued = seen.contains(&batch.partition);
        if !batch.header.continued {
            seen.push(batch.partition);
        }
    }
    Ok(request)
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::segment::MAX_RECORDS_LEN;

    #[test]
    fn a_bad_record_anywhere_refuses_the_whole_request() {
        let small = || NewRecord::value(0, Bytes::from_static(b"a"));
        let huge = NewRecord::value(0, Bytes::from(vec![0u8; MAX_RECORDS_LEN + 1]));
        let items = vec![(0, vec![small(), small()]), (1, vec![small(), huge])];
        assert!(matches!(
            encode_request(items, Compression::None),
            Err(StoreError::Encode(EncodeError::TooLarge { .. }))
        ));
        let items = vec![(0, vec![small()]), (1, vec![small(), small()])];
        let request = encode_request(items, Compression::None).unwrap();
        assert_eq!(request.sorted_partitions(), vec![0, 1]);
        assert_eq!(request.batches.len(), 2);
        assert_eq!(request.bytes_for(1), request.batches[1].range.len() as u64);
    }
}
