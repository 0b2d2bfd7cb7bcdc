//! The bytes of a journal file not yet known durable, and the whole blocks a round writes.
//!
//! Frames reach a journal file in whole [`BLOCK`]s, from memory aligned to a block, so the
//! file can be written with direct I/O ([`crate::fs::OpenMode::WriteDirect`]): the frames go
//! from memory to the device, with no copy into the page cache and no write-back pass in the
//! round's fdatasync (a probe here: 36 KiB `pwrite` + fdatasync 96-103 us mean, direct write +
//! fdatasync 59-78). A write therefore starts at the block that holds the end of the last
//! write, writing that block's bytes again (the same bytes: a torn write keeps each sector's old
//! or new bytes, equal where they were durable), and fills its last block with zeros, in
//! prepared space (zeros, or a recycled file's stale frames: both end a scan).
//!
//! [`Pending`] keeps the file's bytes from the block holding the durable end to the last frame:
//! each write starts from it, and a heal after a failed write or sync writes it all again.

use std::io;
use std::sync::OnceLock;

use crate::fs::{FileHandle, DIRECT_ALIGN};

/// Bytes in a block of a journal write.
pub const BLOCK: u64 = DIRECT_ALIGN as u64;

/// Start of the block holding byte `at`.
pub fn block_start(at: u64) -> u64 {
    at / BLOCK * BLOCK
}

/// `at` rounded up to a whole block.
pub fn block_end(at: u64) -> u64 {
    at.div_ceil(BLOCK) * BLOCK
}

/// Bytes of [`zeros`]: the most one write of zeros takes.
pub const ZEROS_LEN: usize = 64 << 10;

/// [`ZEROS_LEN`] zero bytes aligned to a block, for writing zeros through a direct handle
/// (allocated once per process).
pub fn zeros() -> &'static [u8] {
    static ZEROS: OnceLock<Vec<u8>> = OnceLock::new();
    let buf = ZEROS.get_or_init(|| vec![0u8; ZEROS_LEN + DIRECT_ALIGN]);
    let offset = aligned_offset(buf);
    &buf[offset..offset + ZEROS_LEN]
}

/// Where the first block-aligned byte of `buf` is (at most [`DIRECT_ALIGN`] in).
fn aligned_offset(buf: &[u8]) -> usize {
    // Byte pointers can always be aligned; past a block it would mean it could not.
    buf.as_ptr().align_offset(DIRECT_ALIGN).min(DIRECT_ALIGN)
}

/// Bytes `[at, end)` of a journal file: from the block holding its durable end to its last
/// frame (written or not).
#[derive(Debug)]
pub(crate) struct Pending {
    /// File offset of `bytes[0]`, always a block start.
    at: u64,
    bytes: Vec<u8>,
    /// The memory of a stage written and handed back ([`Self::reuse`]), for the next stage:
    /// a round then neither allocates nor zeroes its blocks (only the last one's tail).
    spare: Vec<u8>,
}

/// The largest stage memory kept for reuse (a larger stage, as a file switch after a long
/// buffered run may write, is freed once written).
const MAX_SPARE_STAGE: usize = 1 << 20;

impl Pending {
    /// A file that holds `head` from offset 0 (its header) and nothing after it.
    pub fn new(head: &[u8]) -> Self {
        Self {
            at: 0,
            bytes: head.to_vec(),
            spare: Vec::new(),
        }
    }

    /// File offset after the last byte.
    pub fn end(&self) -> u64 {
        self.at + self.bytes.len() as u64
    }

    /// File offset of the first byte kept.
    pub fn start(&self) -> u64 {
        self.at
    }

    /// Adds bytes after the last.
    pub fn push(&mut self, bytes: &[u8]) {
        self.bytes.extend_from_slice(bytes);
    }

    /// Drops the bytes from file offset `end` on (never below the first kept).
    pub fn truncate(&mut self, end: u64) {
        assert!(end >= self.at, "a truncation keeps the durable block");
        self.bytes.truncate((end - self.at) as usize);
    }

    /// Forgets the whole blocks below the one holding `durable` (a sync made them durable).
    pub fn durable_to(&mut self, durable: u64) {
        let keep_from = block_start(durable.min(self.end())).max(self.at);
        self.bytes.drain(..(keep_from - self.at) as usize);
        self.at = keep_from;
    }

    /// The blocks from the one holding `from` to the last byte's, zeros after it (in the
    /// memory of the last stage handed back, when it is large enough).
    pub fn stage(&mut self, from: u64) -> Stage {
        let at = block_start(from).max(self.at);
        let len = (block_end(self.end()) - at) as usize;
        let mut buf = std::mem::take(&mut self.spare);
        if buf.len() < len + DIRECT_ALIGN {
            buf = vec![0u8; (len + DIRECT_ALIGN).next_power_of_two()];
        }
        let offset = aligned_offset(&buf);
        let bytes = &self.bytes[(at - self.at) as usize..];
        buf[offset..offset + bytes.len()].copy_from_slice(bytes);
        buf[offset + bytes.len()..offset + len].fill(0);
        Stage {
            at,
            buf,
            offset,
            len,
        }
    }

    /// Takes back a written stage's memory for the next stage (unless it is over
    /// [`MAX_SPARE_STAGE`]).
    pub fn reuse(&mut self, stage: Stage) {
        if stage.buf.len() <= MAX_SPARE_STAGE && stage.buf.len() > self.spare.len() {
            self.spare = stage.buf;
        }
    }
}

/// Whole blocks to write at a block offset, held in memory aligned to a block.
#[derive(Debug)]
pub(crate) struct Stage {
    at: u64,
    buf: Vec<u8>,
    offset: usize,
    len: usize,
}

impl Stage {
    /// File offset after the last block.
    pub fn end(&self) -> u64 {
        self.at + self.len as u64
    }

    /// Writes the blocks to `file`.
    pub fn write(&self, file: &dyn FileHandle) -> io::Result<()> {
        file.write_at(&self.buf[self.offset..self.offset + self.len], self.at)
    }

    /// The blocks' bytes.
    #[cfg(test)]
    pub fn bytes(&self) -> &[u8] {
        &self.buf[self.offset..self.offset + self.len]
    }

    /// Where the blocks go.
    #[cfg(test)]
    pub fn at(&self) -> u64 {
        self.at
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stages_are_whole_aligned_blocks_that_repeat_the_partial_block_before_them() {
        let mut p = Pending::new(&[7u8; 32]);
        p.push(&[1u8; 5000]);
        let first = p.stage(32);
        assert_eq!((first.at(), first.end()), (0, 2 * BLOCK));
        assert_eq!(first.bytes().as_ptr() as usize % DIRECT_ALIGN, 0);
        assert_eq!(&first.bytes()[..32], &[7u8; 32]);
        assert!(first.bytes()[32..5032].iter().all(|&b| b == 1));
        assert!(first.bytes()[5032..].iter().all(|&b| b == 0));
        p.push(&[2u8; 100]);
        let reused = first.bytes().as_ptr();
        p.reuse(first);
        let second = p.stage(5032);
        assert_eq!(second.bytes().as_ptr(), reused, "the handed-back memory");
        assert_eq!((second.at(), second.end()), (BLOCK, 2 * BLOCK));
        let tail = (5032 - BLOCK) as usize;
        assert!(second.bytes()[..tail].iter().all(|&b| b == 1));
        assert!(second.bytes()[tail..tail + 100].iter().all(|&b| b == 2));
        let zeroed = tail + 100;
        assert!(
            second.bytes()[zeroed..].iter().all(|&b| b == 0),
            "the last block's tail is zeros, not the earlier stage's bytes"
        );
        p.durable_to(5032);
        assert_eq!((p.start(), p.end()), (BLOCK, 5132));
        p.truncate(5100);
        assert_eq!(p.end(), 5100);
        assert_eq!(p.stage(p.start()).at(), BLOCK);
    }
}
