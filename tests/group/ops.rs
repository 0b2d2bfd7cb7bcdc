//! The differential test's typed operations: a seed generates a list of [`Op`]s (requests
//! with every value fixed), which `run` then applies to both engines. A failure prints the list.

use bytes::Bytes;
use ursula_runtime::{
    AdvanceRetentionRequest, AppendBatchRequest, AppendRequest, AppendTransactionRequest,
    BootstrapStreamRequest, CloseStreamRequest, ColdWriteAdmission, CreateStreamRequest,
    DeleteSnapshotRequest, DeleteStreamRequest, GetStreamAttrsRequest, GroupWriteCommand,
    HeadStreamRequest, PlanColdFlushRequest, PlanGroupColdFlushRequest, ReadSnapshotRequest,
    ReadStreamRequest, SetBucketQuotaRequest, UpdateStreamAttrsRequest,
};
use ursula_shard::BucketStreamId;
use ursula_stream::{ProducerRequest, StreamAttrs, StreamCommand};

pub const CT: &str = "application/octet-stream";
pub const JSON: &str = "application/json";

/// One generated command (or a reopen of Strata).
#[derive(Debug, Clone)]
pub enum Op {
    Create(CreateStreamRequest),
    Append(AppendRequest, ColdWriteAdmission),
    Batch(AppendBatchRequest),
    Read(ReadStreamRequest),
    Head(HeadStreamRequest),
    Touch {
        id: BucketStreamId,
        now: u64,
        renew: bool,
    },
    Close(CloseStreamRequest),
    Delete(DeleteStreamRequest),
    SetQuota(SetBucketQuotaRequest),
    /// Plan a cold flush on both; each uploads (its own object, or one shared pack written at
    /// `step`) and commits.
    FlushCold {
        request: PlanColdFlushRequest,
        shared_pack: bool,
        step: usize,
    },
    /// Publish a checkpoint at the stream's tail (as the oracle reports it).
    CheckpointAtTail {
        id: BucketStreamId,
        now: u64,
    },
    Retention(AdvanceRetentionRequest),
    Transaction(AppendTransactionRequest),
    WriteBatch(Vec<GroupWriteCommand>),
    Attrs(UpdateStreamAttrsRequest, GetStreamAttrsRequest),
    Snapshots(ReadSnapshotRequest, DeleteSnapshotRequest),
    Bootstrap(BootstrapStreamRequest),
    PlanGroupFlush {
        request: PlanGroupColdFlushRequest,
        max: usize,
        backlog_of: BucketStreamId,
    },
    BatchMany(Vec<AppendBatchRequest>),
    ReadParts(ReadStreamRequest),
    Purge(String),
    /// Close and reopen Strata's store and engine.
    Reopen,
}

/// A small deterministic generator (xorshift64*).
pub struct Rng(pub u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// What every command of one step may use.
struct Step {
    id: BucketStreamId,
    now: u64,
    producer: Option<ProducerRequest>,
    json: bool,
    ct: &'static str,
    payload: Bytes,
    small: Bytes,
}

/// The operations of `steps` steps from `seed` over `ids`, a [`Op::Reopen`] after every
/// `reopen_every` of them (none when zero). Returns the final clock too.
pub fn generate(
    seed: u64,
    steps: usize,
    reopen_every: usize,
    ids: &[BucketStreamId],
) -> (Vec<Op>, u64) {
    let mut rng = Rng(seed | 1);
    let mut now = 1_000u64;
    let mut ops = Vec::with_capacity(steps + steps / reopen_every.max(1));
    for step in 0..steps {
        now += rng.below(1_200);
        let s = step_inputs(&mut rng, ids, now);
        ops.push(command(&mut rng, ids, step, s));
        if reopen_every > 0 && step % reopen_every == reopen_every - 1 {
            ops.push(Op::Reopen);
        }
    }
    (ops, now)
}

/// The stream, producer, content type and payloads of one step.
fn step_inputs(rng: &mut Rng, ids: &[BucketStreamId], now: u64) -> Step {
    let id = ids[rng.below(ids.len() as u64) as usize].clone();
    let producer = (rng.below(3) == 0).then(|| ProducerRequest {
        producer_id: format!("p{}", rng.below(2)),
        producer_epoch: rng.below(2),
        producer_seq: rng.below(4),
    });
    // Streams named j* are JSON record streams: their payloads are newline-ended records
    // (sometimes not, to exercise the boundary checks), and some writes use the other type.
    let json = id.stream_id.starts_with('j');
    let ct = match (json, rng.below(12) == 0) {
        (true, false) | (false, true) => JSON,
        _ => CT,
    };
    let payload = if json {
        let mut text = String::new();
        for _ in 0..1 + rng.below(4) {
            text.push_str(&format!(
                "{{\"n\":{},\"pad\":\"{}\"}}\n",
                rng.below(1000),
                "x".repeat(rng.below(200) as usize)
            ));
        }
        if rng.below(10) == 0 {
            text.pop();
        }
        Bytes::from(text)
    } else {
        Bytes::from(vec![
            b'a' + rng.below(26) as u8;
            1 + rng.below(700) as usize
        ])
    };
    let small = if json {
        Bytes::from_static(b"{}\n")
    } else {
        payload.slice(..1)
    };
    Step {
        id,
        now,
        producer,
        json,
        ct,
        payload,
        small,
    }
}

/// The command of one step (one of 32 kinds, some rarer behind a second draw).
fn command(rng: &mut Rng, ids: &[BucketStreamId], step: usize, s: Step) -> Op {
    let op = rng.below(32);
    match op {
        0 | 1 | 12 if op != 12 || rng.below(2) == 0 => create(rng, &s),
        2..=5 | 26..=31 => append(rng, &s),
        6 => {
            let mut payloads = match rng.below(6) {
                0 | 1 => vec![s.payload.clone(), Bytes::new(), s.small.clone()],
                // An empty batch appends nothing and changes nothing.
                2 => Vec::new(),
                _ => vec![s.payload.clone(), s.small.clone()],
            };
            // Batches of 8 KiB and more hash their integrity digests beside the commit's sync.
            if !payloads.is_empty() && rng.below(3) == 0 {
                let copies = (8 << 10) / s.payload.len() + 1;
                payloads.push(Bytes::from(s.payload.repeat(copies)));
            }
            let mut r = AppendBatchRequest::new(s.id.clone(), payloads);
            r.content_type = s.ct.into();
            r.now_ms = s.now;
            r.producer = s.producer;
            Op::Batch(r)
        }
        7 => Op::Read(ReadStreamRequest {
            stream_id: s.id,
            offset: rng.below(1_500),
            max_len: 1 + rng.below(2_000) as usize,
            now_ms: s.now,
            record: (rng.below(3) != 0).then(|| rng.below(12)),
            max_records: (rng.below(2) == 0).then(|| rng.below(5)),
        }),
        8 => Op::Head(HeadStreamRequest {
            stream_id: s.id,
            now_ms: s.now,
        }),
        9 => Op::Touch {
            id: s.id,
            now: s.now,
            renew: rng.below(2) == 0,
        },
        10 => Op::Close(CloseStreamRequest {
            stream_id: s.id,
            stream_seq: None,
            producer: s.producer,
            now_ms: s.now,
        }),
        11 if rng.below(5) == 0 => Op::Delete(DeleteStreamRequest { stream_id: s.id }),
        12 => Op::SetQuota(SetBucketQuotaRequest {
            bucket_id: s.id.bucket_id.clone(),
            max_streams: (rng.below(3) == 0).then_some(4),
            max_retained_bytes: (rng.below(3) == 0).then_some(3_000 + rng.below(30_000)),
        }),
        13 => Op::FlushCold {
            request: PlanColdFlushRequest {
                stream_id: s.id,
                min_hot_bytes: 1,
                max_flush_bytes: 1 + rng.below(900) as usize,
            },
            shared_pack: rng.below(2) != 0,
            step,
        },
        14 => Op::CheckpointAtTail {
            id: s.id,
            now: s.now,
        },
        15 => Op::Retention(AdvanceRetentionRequest {
            stream_id: s.id,
            retained_offset: rng.below(2_000),
            now_ms: s.now,
        }),
        16 | 17 => transaction(rng, &s),
        18 => write_batch(&s),
        _ => rarer(rng, ids, op, s),
    }
}

/// The commands of kinds 19 to 25 and the fallbacks.
fn rarer(rng: &mut Rng, ids: &[BucketStreamId], op: u64, s: Step) -> Op {
    match op {
        19 => {
            let attrs = (rng.below(3) != 0).then(|| StreamAttrs {
                title: Some(format!("title {}", rng.below(3))),
                metadata: Default::default(),
            });
            let update = UpdateStreamAttrsRequest {
                stream_id: s.id.clone(),
                attrs,
                now_ms: s.now,
            };
            let get = GetStreamAttrsRequest {
                stream_id: s.id,
                now_ms: s.now,
            };
            Op::Attrs(update, get)
        }
        20 => {
            let read = ReadSnapshotRequest {
                stream_id: s.id.clone(),
                snapshot_offset: (rng.below(2) == 0).then(|| rng.below(2_000)),
                now_ms: s.now,
            };
            let delete = DeleteSnapshotRequest {
                stream_id: s.id,
                snapshot_offset: rng.below(2_000),
                now_ms: s.now,
            };
            Op::Snapshots(read, delete)
        }
        21 => Op::Bootstrap(BootstrapStreamRequest {
            stream_id: s.id,
            now_ms: s.now,
        }),
        22 => Op::PlanGroupFlush {
            request: PlanGroupColdFlushRequest {
                min_hot_bytes: rng.below(3_000) as usize,
                max_flush_bytes: 1 + rng.below(1_500) as usize,
                max_batch_bytes: 1 + rng.below(4_000) as usize,
            },
            max: rng.below(4) as usize,
            backlog_of: s.id,
        },
        23 => {
            let mut batch = AppendBatchRequest::new(s.id.clone(), vec![s.payload.clone()]);
            batch.content_type = s.ct.into();
            batch.now_ms = s.now;
            let other = AppendBatchRequest {
                stream_id: ids[rng.below(ids.len() as u64) as usize].clone(),
                ..batch.clone()
            };
            Op::BatchMany(vec![batch, other])
        }
        24 => Op::ReadParts(ReadStreamRequest {
            stream_id: s.id,
            offset: rng.below(1_500),
            max_len: 1 + rng.below(2_000) as usize,
            now_ms: s.now,
            record: None,
            max_records: None,
        }),
        _ if rng.below(6) == 0 => Op::Purge(s.id.bucket_id.clone()),
        _ => Op::Head(HeadStreamRequest {
            stream_id: s.id,
            now_ms: s.now,
        }),
    }
}

fn create(rng: &mut Rng, s: &Step) -> Op {
    let mut r = CreateStreamRequest::new(s.id.clone(), if s.json { JSON } else { CT });
    r.now_ms = s.now;
    r.stream_ttl_seconds = (rng.below(4) == 0).then_some(5);
    if rng.below(2) == 0 {
        r.initial_payload = s.payload.clone();
    }
    r.producer = s.producer.clone().map(|mut p| {
        p.producer_seq = 0;
        p
    });
    Op::Create(r)
}

fn append(rng: &mut Rng, s: &Step) -> Op {
    let mut r = AppendRequest::from_bytes(s.id.clone(), s.payload.clone());
    r.content_type = s.ct.into();
    r.now_ms = s.now;
    r.producer = s.producer.clone();
    if rng.below(6) == 0 {
        r.record_match = Some(rng.below(12));
    }
    if rng.below(8) == 0 {
        r.stream_seq = Some(format!("{:04}", rng.below(50)));
    }
    let admission = if rng.below(6) == 0 {
        ColdWriteAdmission {
            max_hot_bytes_per_group: Some(4_000),
        }
    } else {
        ColdWriteAdmission::default()
    };
    Op::Append(r, admission)
}

/// An append transaction over the affinity streams (sometimes one that is missing).
fn transaction(rng: &mut Rng, s: &Step) -> Op {
    let mut operations = Vec::new();
    for name in ["t0", "t1", "t0"] {
        if rng.below(3) == 0 {
            continue;
        }
        let mut r = AppendRequest::from_bytes(
            BucketStreamId::with_affinity("bucket-a", "aff", name),
            s.payload
                .slice(..1 + rng.below(s.payload.len() as u64) as usize),
        );
        r.content_type = CT.into();
        r.now_ms = s.now;
        operations.push(r);
    }
    Op::Transaction(AppendTransactionRequest { operations })
}

/// The provided write_batch / dispatch path over a few canonical commands.
fn write_batch(s: &Step) -> Op {
    let mut append = AppendRequest::from_bytes(s.id.clone(), s.payload.clone());
    append.content_type = s.ct.into();
    append.now_ms = s.now;
    let commands = vec![
        StreamCommand::from(append),
        StreamCommand::TouchStreamAccess {
            stream_id: s.id.clone(),
            now_ms: s.now,
            renew_ttl: true,
        },
        StreamCommand::CreateBucket {
            bucket_id: s.id.bucket_id.clone(),
        },
    ];
    Op::WriteBatch(vec![
        GroupWriteCommand::Batch {
            commands: commands.clone(),
        },
        GroupWriteCommand::Stream(commands[0].clone()),
    ])
}

impl Op {
    /// One line for a failure report: the operation's debug form, cut at `width` characters.
    pub fn line(&self, width: usize) -> String {
        let text = format!("{self:?}");
        match text.char_indices().nth(width) {
            Some((at, _)) => format!("{}…", &text[..at]),
            None => text,
        }
    }
}
