//! A fault layer for object stores, as [`crate::fs::FaultFs`] is one for files: wraps any
//! `object_store` backend and can fail the Nth request of a kind, lose the answer after the
//! store acted, hang, store a truncated or another object's body while answering success,
//! refuse requests on some paths for good (an object lock, a bucket policy), and go down and
//! come back. The cold-tier fault tests drive every cold path through it.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::{self, BoxStream, StreamExt};
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
};

/// A kind of request to an object store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ObjectOp {
    /// An upload.
    Put,
    /// A read of an object or a range of it.
    Get,
    /// A read of an object's metadata (its size).
    Head,
    /// A delete.
    Delete,
    /// A listing.
    List,
}

impl ObjectOp {
    /// Every kind.
    pub const ALL: [ObjectOp; 5] = [Self::Put, Self::Get, Self::Head, Self::Delete, Self::List];
}

/// What an injected fault does to its request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectFault {
    /// The request fails before the store acts (a 503).
    Fail,
    /// The store acts, then the answer is lost: the caller gets an error.
    LoseAnswer,
    /// The request never gets an answer.
    Hang,
    /// An upload keeps only the first half of its body and answers success (other requests
    /// pass).
    Truncate,
    /// An upload keeps the body of the upload before it (another intact object, or the body
    /// with a flipped byte if there was none) and answers success (other requests pass).
    Substitute,
    /// The store goes down: this request and every later one fail until
    /// [`FaultObjectStore::set_down`]`(false)`.
    Down,
}

impl ObjectFault {
    /// Every fault.
    pub const ALL: [ObjectFault; 6] = [
        Self::Fail,
        Self::LoseAnswer,
        Self::Hang,
        Self::Truncate,
        Self::Substitute,
        Self::Down,
    ];
}

/// What to do with one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decision {
    Pass,
    Fault(ObjectFault),
    Refuse,
}

#[derive(Debug, Default)]
struct FaultState {
    /// Requests seen so far, by kind.
    counts: HashMap<ObjectOp, u64>,
    /// The next fault: at request number `.1` (counted from 0) of kind `.0`.
    planned: Option<(ObjectOp, u64, ObjectFault)>,
    /// Whether the planned fault fired.
    fired: bool,
    /// Requests refused for good: kind, and a fragment of the path.
    refused: Vec<(ObjectOp, String)>,
    down: bool,
    /// The body of the last upload that passed (what [`ObjectFault::Substitute`] stores).
    last_put: Option<Bytes>,
}

/// An object store with injected faults (cheap to clone; clones share the plan).
#[derive(Debug, Clone)]
pub struct FaultObjectStore {
    inner: Arc<dyn ObjectStore>,
    state: Arc<Mutex<FaultState>>,
}

impl fmt::Display for FaultObjectStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FaultObjectStore({})", self.inner)
    }
}

/// The error an injected fault answers with.
fn injected(what: &str) -> object_store::Error {
    object_store::Error::Generic {
        store: "FaultObjectStore",
        source: format!("injected fault: {what}").into(),
    }
}

impl FaultObjectStore {
    /// Wraps `inner`, with no fault planned.
    pub fn new(inner: Arc<dyn ObjectStore>) -> Self {
        Self {
            inner,
            state: Arc::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, FaultState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Plans `fault` for request number `nth` (counted from 0 since the store was made) of
    /// kind `op`, replacing any planned fault.
    pub fn inject(&self, op: ObjectOp, nth: u64, fault: ObjectFault) {
        let mut state = self.lock();
        state.planned = Some((op, nth, fault));
        state.fired = false;
    }

    /// Whether the planned fault fired.
    pub fn fired(&self) -> bool {
        self.lock().fired
    }

    /// Requests of kind `op` seen so far.
    pub fn count(&self, op: ObjectOp) -> u64 {
        self.lock().counts.get(&op).copied().unwrap_or(0)
    }

    /// Refuses every request of kind `op` on a path containing `fragment`, for good (a 403).
    pub fn refuse(&self, op: ObjectOp, fragment: impl Into<String>) {
        self.lock().refused.push((op, fragment.into()));
    }

    /// Lifts every refusal.
    pub fn allow_all(&self) {
        self.lock().refused.clear();
    }

    /// Takes the store down (every request fails) or brings it back.
    pub fn set_down(&self, down: bool) {
        self.lock().down = down;
    }

    /// Counts one request of kind `op` on `path` and decides its fate.
    fn decide(&self, op: ObjectOp, path: &str) -> Decision {
        let mut state = self.lock();
        let counted = state.counts.entry(op).or_insert(0);
        let n = *counted;
        *counted += 1;
        if state.planned == Some((op, n, ObjectFault::Down)) {
            state.fired = true;
            state.down = true;
        }
        if state.down {
            return Decision::Fault(ObjectFault::Down);
        }
        if state
            .refused
            .iter()
            .any(|(o, fragment)| *o == op && path.contains(fragment.as_str()))
        {
            return Decision::Refuse;
        }
        match state.planned {
            Some((o, at, fault)) if o == op && at == n => {
                state.fired = true;
                Decision::Fault(fault)
            }
            _ => Decision::Pass,
        }
    }

    /// The answer to a request the decision stops before the store acts, if any.
    async fn stopped(decision: Decision, path: &str) -> Option<object_store::Error> {
        match decision {
            Decision::Fault(ObjectFault::Hang) => std::future::pending().await,
            Decision::Fault(ObjectFault::Fail) => Some(injected("request failed")),
            Decision::Fault(ObjectFault::Down) => Some(injected("store is down")),
            Decision::Refuse => Some(object_store::Error::PermissionDenied {
                path: path.to_string(),
                source: "injected fault: refused for good".into(),
            }),
            _ => None,
        }
    }

    /// The body an upload stores under `decision`.
    fn stored_body(&self, decision: Decision, body: Bytes) -> Bytes {
        match decision {
            Decision::Fault(ObjectFault::Truncate) => body.slice(..body.len() / 2),
            Decision::Fault(ObjectFault::Substitute) => {
                match self.lock().last_put.clone().filter(|last| *last != body) {
                    Some(other) => other,
                    None => {
                        let mut flipped = body.to_vec();
                        if let Some(b) = flipped.last_mut() {
                            *b ^= 0x5a;
                        }
                        Bytes::from(flipped)
                    }
                }
            }
            _ => {
                self.lock().last_put = Some(body.clone());
                body
            }
        }
    }

    /// The answer after the store acted: lost under [`ObjectFault::LoseAnswer`].
    fn answered<T>(decision: Decision, answer: Result<T>) -> Result<T> {
        match (decision, answer) {
            (Decision::Fault(ObjectFault::LoseAnswer), Ok(_)) => Err(injected("answer lost")),
            (_, answer) => answer,
        }
    }
}

#[async_trait]
impl ObjectStore for FaultObjectStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        let decision = self.decide(ObjectOp::Put, location.as_ref());
        if let Some(e) = Self::stopped(decision, location.as_ref()).await {
            return Err(e);
        }
        let body: Bytes = payload.into_iter().flatten().collect::<Vec<u8>>().into();
        let body = self.stored_body(decision, body);
        let answer = self
            .inner
            .put_opts(location, PutPayload::from_bytes(body), opts)
            .await;
        Self::answered(decision, answer)
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        let decision = self.decide(ObjectOp::Put, location.as_ref());
        if let Some(e) = Self::stopped(decision, location.as_ref()).await {
            return Err(e);
        }
        let answer = self.inner.put_multipart_opts(location, opts).await;
        Self::answered(decision, answer)
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let op = if options.head {
            ObjectOp::Head
        } else {
            ObjectOp::Get
        };
        let decision = self.decide(op, location.as_ref());
        if let Some(e) = Self::stopped(decision, location.as_ref()).await {
            return Err(e);
        }
        let answer = self.inner.get_opts(location, options).await;
        Self::answered(decision, answer)
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        let this = self.clone();
        locations
            .then(move |location| {
                let this = this.clone();
                async move {
                    let location = location?;
                    let decision = this.decide(ObjectOp::Delete, location.as_ref());
                    if let Some(e) = Self::stopped(decision, location.as_ref()).await {
                        return Err(e);
                    }
                    let answer = this.inner.delete(&location).await.map(|()| location);
                    Self::answered(decision, answer)
                }
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        let path = prefix.map(|p| p.to_string()).unwrap_or_default();
        match self.decide(ObjectOp::List, &path) {
            Decision::Pass | Decision::Fault(ObjectFault::Truncate | ObjectFault::Substitute) => {
                self.inner.list(prefix)
            }
            Decision::Fault(ObjectFault::Hang) => stream::pending().boxed(),
            _ => stream::once(async { Err(injected("list failed")) }).boxed(),
        }
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        let path = prefix.map(|p| p.to_string()).unwrap_or_default();
        let decision = self.decide(ObjectOp::List, &path);
        if let Some(e) = Self::stopped(decision, &path).await {
            return Err(e);
        }
        let answer = self.inner.list_with_delimiter(prefix).await;
        Self::answered(decision, answer)
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        let decision = self.decide(ObjectOp::Put, to.as_ref());
        if let Some(e) = Self::stopped(decision, to.as_ref()).await {
            return Err(e);
        }
        let answer = self.inner.copy_opts(from, to, options).await;
        Self::answered(decision, answer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;

    fn store() -> FaultObjectStore {
        FaultObjectStore::new(Arc::new(InMemory::new()))
    }

    #[tokio::test]
    async fn each_fault_does_what_it_says() {
        let s = store();
        let (a, b) = (Path::from("a"), Path::from("b"));
        s.put(&a, Bytes::from_static(b"first body").into())
            .await
            .unwrap();
        s.inject(ObjectOp::Put, 1, ObjectFault::Truncate);
        s.put(&b, Bytes::from_static(b"0123456789").into())
            .await
            .unwrap();
        assert!(s.fired());
        assert_eq!(s.get(&b).await.unwrap().bytes().await.unwrap(), "01234");
        s.inject(ObjectOp::Put, 2, ObjectFault::Substitute);
        s.put(&b, Bytes::from_static(b"second").into())
            .await
            .unwrap();
        assert_eq!(
            s.get(&b).await.unwrap().bytes().await.unwrap(),
            "first body"
        );
        s.inject(ObjectOp::Delete, 0, ObjectFault::LoseAnswer);
        assert!(s.delete(&a).await.is_err(), "the answer was lost");
        assert!(s.head(&a).await.is_err(), "but the delete happened");
        s.refuse(ObjectOp::Delete, "b");
        assert!(matches!(
            s.delete(&b).await,
            Err(object_store::Error::PermissionDenied { .. })
        ));
        s.allow_all();
        s.inject(ObjectOp::Get, 2, ObjectFault::Down);
        assert!(s.get(&b).await.is_err());
        assert!(s.head(&b).await.is_err(), "still down");
        s.set_down(false);
        assert!(s.head(&b).await.is_ok());
        s.inject(ObjectOp::Head, s.count(ObjectOp::Head), ObjectFault::Hang);
        let hung = tokio::time::timeout(std::time::Duration::from_millis(50), s.head(&b)).await;
        assert!(hung.is_err(), "a hung request never answers");
    }
}
