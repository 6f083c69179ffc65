//! The collections a router-side `$lookup` or `$unionWith` reads (the part of a pipeline the
//! router runs, `pipeline.rs`): each read is a `find` routed as a client's would be, to the
//! shards owning the matching chunks, read to its end with getMores and bounded in bytes, as
//! mongos runs these stages on its merging part. `$out` and `$merge` are not run by a router.

use std::sync::Arc;

use bson::{doc, Bson, Document};
use myriad_query::aggregate::{DocumentStream, ForeignSource, MergeDecision, Namespace, OutWriter, VecStream};
use myriad_query::{QueryError, QueryResult};

use crate::error::{ClusterError, ClusterResult, ILLEGAL_OPERATION};
use crate::router::command::find;
use crate::router::context::RouterContext;
use crate::router::request::RouterRequest;

/// The bytes one foreign read may hold (MongoDB's 100 MiB stage memory bound).
const FOREIGN_READ_MAX_BYTES: usize = 100 * 1024 * 1024;

pub struct RouterForeignSource {
    context: Arc<RouterContext>,
    db: String,
    session: Option<Document>,
    /// The command's explicit collation: the reads of other collections use it too.
    collation: Option<bson::Bson>,
    connection_id: i64,
    runtime: tokio::runtime::Handle,
}

impl RouterForeignSource {
    pub fn new(context: &Arc<RouterContext>, request: &RouterRequest) -> RouterForeignSource {
        RouterForeignSource {
            context: Arc::clone(context),
            db: request.db.clone(),
            session: request.session(),
            collation: request.body.get("collation").cloned(),
            connection_id: request.connection_id,
            runtime: tokio::runtime::Handle::current(),
        }
    }

    fn request(&self, db: &str, mut body: Document) -> ClusterResult<RouterRequest> {
        if let Some(session) = &self.session {
            body.insert("lsid", session.clone());
        }
        RouterRequest::new(db.to_string(), body, self.connection_id, None)
    }

    /// Every document of `collection` matching `filter`, through the router's find and getMore.
    async fn read_all(&self, db: &str, collection: &str, filter: &Document) -> ClusterResult<Vec<Document>> {
        let mut body = doc! {"find": collection, "filter": filter.clone()};
        if let Some(collation) = &self.collation {
            body.insert("collation", collation.clone());
        }
        let mut reply = find::run(&self.context, &self.request(db, body)?).await?;
        let mut documents = Vec::new();
        let mut bytes = 0usize;
        let mut batch_field = "firstBatch";
        loop {
            let cursor = reply.get_document("cursor").map_err(|_| ClusterError::internal("a find reply without its cursor"))?;
            for document in cursor.get_array(batch_field).map_err(|_| ClusterError::internal("a cursor without its batch"))? {
                let Bson::Document(document) = document else { continue };
                bytes += bson::to_vec(document).map(|encoded| encoded.len()).unwrap_or(0);
                if bytes > FOREIGN_READ_MAX_BYTES {
                    return Err(ClusterError::coded(
                        292,
                        format!("a $lookup or $unionWith read of {db}.{collection} through the router exceeded {FOREIGN_READ_MAX_BYTES} bytes"),
                    ));
                }
                documents.push(document.clone());
            }
            let id = cursor.get_i64("id").unwrap_or(0);
            if id == 0 {
                return Ok(documents);
            }
            reply = find::get_more(&self.context, &self.request(db, doc! {"getMore": id, "collection": collection})?).await?;
            batch_field = "nextBatch";
        }
    }
}

fn query_error(error: ClusterError) -> QueryError {
    QueryError::Location(error.code(), error.message())
}

fn not_on_router(stage: &str) -> QueryError {
    QueryError::Location(ILLEGAL_OPERATION, format!("{stage} is not supported through the router yet"))
}

impl ForeignSource for RouterForeignSource {
    fn read(&self, namespace: &Namespace, filter: &Document) -> QueryResult<Box<dyn DocumentStream>> {
        let db = namespace.db.clone().unwrap_or_else(|| self.db.clone());
        // The pipeline runs inside the cursor's task: the read waits here, with this worker's
        // other tasks moved away meanwhile.
        let documents = tokio::task::block_in_place(|| self.runtime.block_on(self.read_all(&db, &namespace.collection, filter))).map_err(query_error)?;
        Ok(Box::new(VecStream(documents.into_iter())))
    }

    fn check_interrupt(&self) -> QueryResult<()> {
        Ok(())
    }

    fn begin_out(&self, _target: &Namespace) -> QueryResult<Box<dyn OutWriter>> {
        Err(not_on_router("$out"))
    }

    fn check_merge_target(&self, _target: &Namespace, _on: &[String]) -> QueryResult<()> {
        Err(not_on_router("$merge"))
    }

    fn merge_one(
        &self,
        _target: &Namespace,
        _on_values: &Document,
        _decide: &mut dyn FnMut(Option<&Document>) -> QueryResult<MergeDecision>,
    ) -> QueryResult<()> {
        Err(not_on_router("$merge"))
    }
}
