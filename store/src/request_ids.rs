//! Idempotent mutations. A write that names a client request id records, in
//! the same transaction, the id, what was asked (the RPC and a fingerprint
//! of the request) and the answer; a later write with the same id and the
//! same request gets that first answer back and changes nothing, and one
//! with a different request is refused. Ids are per actor (the client's
//! name), kept at least [`KEEP_MS`], and pruned a few at a time as new ones
//! arrive, so the table stays bounded by a day's traffic.
use base64::Engine as _;

use super::sql::Db;
use super::{AppliedPipeline, Error, PlanView, Store, TaskView, WriteContext, WrittenTodos};

/// How long an id and its answer are kept.
pub const KEEP_MS: i64 = 24 * 3600 * 1000;

/// Answers larger than this are not kept (a retry is then told the request
/// was applied, and to read the state again).
const MAX_ANSWER_BYTES: usize = 1 << 20;

/// Expired ids removed per new one: pruning keeps pace with arrivals.
const PRUNE_BATCH: i64 = 16;

/// A client's request id, with what it asked for.
#[derive(Clone)]
pub struct RequestKey {
    pub id: String,
    /// The RPC, e.g. `CreateTask`.
    pub method: &'static str,
    /// A hash of the request without its id (hex).
    pub fingerprint: String,
    /// How the answer is kept: the wire format is the API's, not the store's.
    pub codec: &'static dyn AnswerCodec,
}

impl std::fmt::Debug for RequestKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestKey")
            .field("id", &self.id)
            .field("method", &self.method)
            .field("fingerprint", &self.fingerprint)
            .finish_non_exhaustive()
    }
}

/// The bytes a replay returns for each answer a write can give. The store
/// keeps them with the change; the API, which owns the wire format, says
/// what they are (it encodes the response the first call got).
pub trait AnswerCodec: Send + Sync {
    fn plan(&self, plan: &PlanView) -> Vec<u8>;
    fn task(&self, task: &TaskView) -> Vec<u8>;
    fn written_todos(&self, written: &WrittenTodos) -> Vec<u8>;
    fn applied_pipeline(&self, applied: &AppliedPipeline) -> Vec<u8>;
}

/// What a write answers, as the bytes a replay returns.
pub trait Answer {
    fn encoded(&self, codec: &dyn AnswerCodec) -> Vec<u8>;
}

impl Answer for PlanView {
    fn encoded(&self, codec: &dyn AnswerCodec) -> Vec<u8> {
        codec.plan(self)
    }
}

impl Answer for TaskView {
    fn encoded(&self, codec: &dyn AnswerCodec) -> Vec<u8> {
        codec.task(self)
    }
}

impl Answer for WrittenTodos {
    fn encoded(&self, codec: &dyn AnswerCodec) -> Vec<u8> {
        codec.written_todos(self)
    }
}

impl Answer for AppliedPipeline {
    fn encoded(&self, codec: &dyn AnswerCodec) -> Vec<u8> {
        codec.applied_pipeline(self)
    }
}

/// A write's outcome: done now, or done before under the same request id.
#[derive(Debug)]
pub enum Once<T> {
    Fresh(T),
    /// The first answer's bytes.
    Replayed(Vec<u8>),
}

impl<T> Once<T> {
    /// What a write without a request id did (it is never a replay).
    pub fn fresh(self) -> Option<T> {
        match self {
            Once::Fresh(value) => Some(value),
            Once::Replayed(_) => None,
        }
    }
}

struct Kept {
    method: String,
    fingerprint: String,
    response: Option<String>,
}

fn kept(db: &mut Db, actor: &str, id: &str) -> Result<Option<Kept>, Error> {
    db.query_row(
        "SELECT method, fingerprint, response FROM request_ids \
         WHERE actor = ? AND request_id = ?",
        &[actor.into(), id.into()],
        |row| {
            Ok(Kept {
                method: row.text(0)?.to_string(),
                fingerprint: row.text(1)?.to_string(),
                response: row.opt_text(2)?.map(str::to_string),
            })
        },
    )
}

fn record(
    db: &mut Db,
    actor: &str,
    key: &RequestKey,
    answer: &[u8],
    now: i64,
) -> Result<(), Error> {
    let response = (answer.len() <= MAX_ANSWER_BYTES)
        .then(|| base64::engine::general_purpose::STANDARD.encode(answer));
    db.execute(
        "DELETE FROM request_ids WHERE (actor, request_id) IN \
         (SELECT actor, request_id FROM request_ids WHERE created_ms < ? \
          ORDER BY created_ms LIMIT ?)",
        &[(now - KEEP_MS).into(), PRUNE_BATCH.into()],
    )?;
    db.execute(
        "INSERT INTO request_ids (actor, request_id, method, fingerprint, response, created_ms) \
         VALUES (?, ?, ?, ?, ?, ?)",
        &[
            actor.into(),
            key.id.as_str().into(),
            key.method.into(),
            key.fingerprint.as_str().into(),
            response.as_ref().into(),
            now.into(),
        ],
    )?;
    Ok(())
}

/// The kept answer for a retry of the same request, or why not.
fn replay(kept: Kept, key: &RequestKey) -> Result<Vec<u8>, Error> {
    if kept.method != key.method || kept.fingerprint != key.fingerprint {
        return Err(Error::RequestIdReused {
            id: key.id.clone(),
            method: kept.method,
        });
    }
    kept.response
        .and_then(|r| base64::engine::general_purpose::STANDARD.decode(r).ok())
        .ok_or_else(|| Error::AnswerNotKept { id: key.id.clone() })
}

impl Store {
    /// The first answer kept for `key`, if it was seen (a read: a retry is
    /// answered before its request is checked again).
    pub async fn kept_answer(
        &self,
        actor: &str,
        key: &RequestKey,
    ) -> Result<Option<Vec<u8>>, Error> {
        let kept = self.read(|db| kept(db, actor, &key.id)).await?;
        match kept {
            None => Ok(None),
            Some(kept) => replay(kept, key).map(Some),
        }
    }

    /// [`Store::write`] for a mutation a client may retry: with a request
    /// id in `ctx`, the first answer is kept with the change, and a retry
    /// gets it back without running `body`.
    #[track_caller]
    pub(super) fn write_once<'s, T: Answer + 's>(
        &'s self,
        ctx: &'s WriteContext,
        body: impl FnOnce(&mut Db) -> Result<(T, Option<i64>), Error> + 's,
    ) -> impl std::future::Future<Output = Result<Once<T>, Error>> + 's {
        let Some(key) = &ctx.request else {
            let write = self.write(body);
            return futures::future::Either::Left(async move { Ok(Once::Fresh(write.await?)) });
        };
        futures::future::Either::Right(self.write(move |db| {
            crate::failpoint::hit("store.client_write");
            if let Some(kept) = kept(db, &ctx.actor, &key.id)? {
                return Ok((Once::Replayed(replay(kept, key)?), None));
            }
            let (value, seq) = body(db)?;
            record(
                db,
                &ctx.actor,
                key,
                &value.encoded(key.codec),
                super::now_ms(),
            )?;
            Ok((Once::Fresh(value), seq))
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Answers as their Debug text: these tests read no answer back.
    struct DebugCodec;

    impl AnswerCodec for DebugCodec {
        fn plan(&self, plan: &PlanView) -> Vec<u8> {
            format!("{plan:?}").into_bytes()
        }
        fn task(&self, task: &TaskView) -> Vec<u8> {
            format!("{task:?}").into_bytes()
        }
        fn written_todos(&self, written: &WrittenTodos) -> Vec<u8> {
            format!("{written:?}").into_bytes()
        }
        fn applied_pipeline(&self, applied: &AppliedPipeline) -> Vec<u8> {
            format!("{applied:?}").into_bytes()
        }
    }

    fn key(id: &str) -> RequestKey {
        RequestKey {
            id: id.into(),
            method: "CreatePlan",
            fingerprint: "f".into(),
            codec: &DebugCodec,
        }
    }

    async fn ids(store: &Store) -> Vec<String> {
        store
            .read(|db| {
                db.query(
                    "SELECT request_id FROM request_ids ORDER BY request_id",
                    &[],
                    |row| Ok(row.text(0)?.to_string()),
                )
            })
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn ids_older_than_a_day_are_pruned_as_new_ones_arrive() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_for_test(dir.path()).await.unwrap();
        let now = super::super::now_ms();
        store
            .write(|db| {
                for (i, age) in [KEEP_MS + 60_000, KEEP_MS + 1, KEEP_MS - 60_000]
                    .iter()
                    .enumerate()
                {
                    record(db, "a", &key(&format!("old{i}")), b"answer", now - age)?;
                }
                Ok(((), None))
            })
            .await
            .unwrap();
        // A new id removes the expired ones, and keeps the one within a day.
        store
            .write(|db| record(db, "a", &key("new"), b"answer", now).map(|()| ((), None)))
            .await
            .unwrap();
        assert_eq!(ids(&store).await, ["new", "old2"]);
        // An answer too large to keep is noted without it: a retry is told so.
        let big = vec![0u8; MAX_ANSWER_BYTES + 1];
        store
            .write(|db| record(db, "a", &key("big"), &big, now).map(|()| ((), None)))
            .await
            .unwrap();
        let kept = store.kept_answer("a", &key("big")).await.unwrap_err();
        assert!(matches!(kept, Error::AnswerNotKept { .. }), "{kept:?}");
        // Ids are per client.
        assert!(store.kept_answer("b", &key("new")).await.unwrap().is_none());
        let other = RequestKey {
            fingerprint: "g".into(),
            ..key("new")
        };
        assert!(matches!(
            store.kept_answer("a", &other).await,
            Err(Error::RequestIdReused { .. })
        ));
        store.close().await;
    }
}
