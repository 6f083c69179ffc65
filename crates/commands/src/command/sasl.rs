//! `saslStart`, `saslContinue` and `logout`: SCRAM-SHA-1 and SCRAM-SHA-256 conversations on
//! the connection's session, with MongoDB's reply shape (`conversationId`, `done`, `payload`
//! as BinData) and log lines (20249 "Authentication failed", 20250 "Authentication succeeded").
//! A hello's `speculativeAuthenticate` runs the same first step ([`speculative_start`]), or, for
//! MONGODB-X509, the whole `authenticate` command ([`crate::command::authenticate`]).

use bson::spec::BinarySubtype;
use bson::{doc, Binary, Bson, Document};
use serde_json::json;

use crate::auth::scram::{self, Credential, Mechanism, ScramError, ServerConversation};
use crate::auth::{store, UserName, AUTHENTICATION_FAILED, MECHANISM_UNAVAILABLE};
use crate::error::{CommandError, CommandResult, PROTOCOL_ERROR};
use crate::request::type_name;
use crate::session::Conversation;
use crate::{CommandRequest, ServerContext};

/// MongoDB numbers a connection's one conversation 1.
const CONVERSATION_ID: i32 = 1;

pub fn start(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    start_conversation(context, request, &request.body, &request.db, false)
}

/// A hello's `speculativeAuthenticate: {saslStart, mechanism, payload, db}`: the reply's
/// `speculativeAuthenticate` document, or None when it failed (the hello still succeeds).
pub fn speculative_start(context: &ServerContext, request: &CommandRequest, body: &Document) -> Option<Document> {
    if body.contains_key("authenticate") {
        return crate::command::authenticate::speculative(context, request, body);
    }
    let db = body.get_str("db").unwrap_or(&request.db).to_string();
    let mut reply = start_conversation(context, request, body, &db, true).ok()?;
    reply.remove("ok");
    Some(reply)
}

fn start_conversation(context: &ServerContext, request: &CommandRequest, body: &Document, db: &str, speculative: bool) -> CommandResult<Document> {
    let session = &request.connection.session;
    session.set_conversation(None);
    let mechanism_name = match body.get("mechanism") {
        Some(Bson::String(name)) => name.as_str(),
        Some(other) => return Err(CommandError::new(crate::error::TYPE_MISMATCH, format!("BSON field 'saslStart.mechanism' is the wrong type '{}', expected type 'string'", type_name(other)))),
        None => return Err(CommandError::new(crate::error::NO_SUCH_KEY, "BSON field 'saslStart.mechanism' is missing but a required field")),
    };
    let Some(mechanism) = Mechanism::from_name(mechanism_name) else {
        return Err(CommandError::new(MECHANISM_UNAVAILABLE, format!("Received authentication for mechanism {mechanism_name} which is unknown or not enabled")));
    };
    let payload = payload_bytes(body, "saslStart")?;
    let fail = |user: &str, error: ScramError| failed(context, request, mechanism.name(), user, db, speculative, &error);
    let client_first = scram::parse_client_first(&payload).map_err(|error| fail("", error))?;
    let user = client_first.user.clone();
    let credential = stored_credential(context, mechanism, &user, db)?.ok_or_else(|| fail(&user, ScramError::UnknownUser))?;
    let (scram_state, server_first) = ServerConversation::start(mechanism, client_first, credential);
    let skip_empty_exchange = body.get_document("options").ok().and_then(|options| options.get("skipEmptyExchange")).and_then(crate::request::truthy).unwrap_or(false);
    session.set_conversation(Some(Conversation {
        id: CONVERSATION_ID,
        db: db.to_string(),
        scram: Some(scram_state),
        user,
        mechanism: mechanism.name(),
        skip_empty_exchange,
        speculative,
    }));
    Ok(sasl_reply(false, server_first.into_bytes()))
}

/// The user's credential for `mechanism`, None when the user or its credential is missing.
fn stored_credential(context: &ServerContext, mechanism: Mechanism, user: &str, db: &str) -> CommandResult<Option<Credential>> {
    if let Some(internal) = context.security.internal_credential(mechanism, user, db) {
        return Ok(Some(internal));
    }
    let Some(document) = context.users.get(store::USERS_COLLECTION, &store::document_id(db, user))? else { return Ok(None) };
    Ok(document.get_document("credentials").ok().and_then(|credentials| credentials.get_document(mechanism.name()).ok()).and_then(Credential::from_document))
}

pub fn continue_conversation(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let session = &request.connection.session;
    let conversation_id = request.body.get("conversationId").and_then(crate::request::integer_value);
    let payload = payload_bytes(&request.body, "saslContinue")?;
    let Some(mut conversation) = session.take_conversation() else {
        return Err(CommandError::new(PROTOCOL_ERROR, "No SASL session state found"));
    };
    if conversation_id != Some(i64::from(conversation.id)) {
        return Err(CommandError::new(PROTOCOL_ERROR, "Invalid conversation ID"));
    }
    let Some(scram_state) = conversation.scram.take() else {
        // The empty closing round of a conversation whose proof already checked.
        succeeded(context, request, &conversation);
        return Ok(sasl_reply(true, Vec::new()));
    };
    match scram_state.finish(&payload) {
        Ok(server_final) => {
            if conversation.skip_empty_exchange {
                succeeded(context, request, &conversation);
                return Ok(sasl_reply(true, server_final.into_bytes()));
            }
            session.set_conversation(Some(conversation));
            Ok(sasl_reply(false, server_final.into_bytes()))
        }
        Err(error) => Err(failed(context, request, conversation.mechanism, &conversation.user, &conversation.db, conversation.speculative, &error)),
    }
}

pub fn logout(_context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    request.connection.session.logout();
    Ok(doc! { "ok": 1.0 })
}

fn payload_bytes(body: &Document, command: &str) -> CommandResult<Vec<u8>> {
    match body.get("payload") {
        Some(Bson::Binary(binary)) => Ok(binary.bytes.clone()),
        Some(Bson::String(text)) => Ok(text.as_bytes().to_vec()),
        Some(other) => Err(CommandError::new(crate::error::TYPE_MISMATCH, format!("BSON field '{command}.payload' is the wrong type '{}', expected types '[string, binData]'", type_name(other)))),
        None => Err(CommandError::new(crate::error::NO_SUCH_KEY, format!("BSON field '{command}.payload' is missing but a required field"))),
    }
}

fn sasl_reply(done: bool, payload: Vec<u8>) -> Document {
    doc! {
        "conversationId": CONVERSATION_ID,
        "done": done,
        "payload": Binary { subtype: BinarySubtype::Generic, bytes: payload },
        "ok": 1.0,
    }
}

fn connection_context(request: &CommandRequest) -> String {
    format!("conn{}", request.connection.connection_id)
}

fn remote(request: &CommandRequest) -> String {
    request.connection.remote_address.map(|address| address.to_string()).unwrap_or_default()
}

/// Who tried to authenticate, how, for the log lines.
pub(crate) struct Attempt<'a> {
    pub mechanism: &'a str,
    pub user: &'a str,
    pub db: &'a str,
    pub speculative: bool,
}

impl Attempt<'_> {
    fn attributes(&self, request: &CommandRequest) -> serde_json::Value {
        json!({
            "mechanism": self.mechanism,
            "speculative": self.speculative,
            "principalName": self.user,
            "authenticationDatabase": self.db,
            "remote": remote(request),
            "extraInfo": {},
        })
    }
}

fn succeeded(context: &ServerContext, request: &CommandRequest, conversation: &Conversation) {
    let attempt = Attempt { mechanism: conversation.mechanism, user: &conversation.user, db: &conversation.db, speculative: conversation.speculative };
    log_success(context, request, &attempt);
}

/// A successful login: the connection is now this user, and MongoDB's 20250 is logged.
pub(crate) fn log_success(context: &ServerContext, request: &CommandRequest, attempt: &Attempt<'_>) {
    request.connection.session.authenticate(UserName::new(attempt.user, attempt.db));
    context.logger.info("ACCESS", 20250, &connection_context(request), "Authentication succeeded", attempt.attributes(request));
}

/// Logs the failure (MongoDB's 20249), waits out the address's rate limit, and answers
/// AuthenticationFailed; the connection stays unauthenticated.
fn failed(context: &ServerContext, request: &CommandRequest, mechanism: &str, user: &str, db: &str, speculative: bool, error: &ScramError) -> CommandError {
    request.connection.session.set_conversation(None);
    log_failure(context, request, &Attempt { mechanism, user, db, speculative }, &error.to_string());
    CommandError::new(AUTHENTICATION_FAILED, "Authentication failed.")
}

/// A failed login of any mechanism: logs MongoDB's 20249 with the reason, and waits out the
/// client address's rate limit (a hello's speculative attempt runs on the connection task,
/// which must not block; the explicit attempt that follows it waits instead).
pub(crate) fn log_failure(context: &ServerContext, request: &CommandRequest, attempt: &Attempt<'_>, reason: &str) {
    let mut attributes = attempt.attributes(request);
    attributes["error"] = json!(reason);
    context.logger.info("ACCESS", 20249, &connection_context(request), "Authentication failed", attributes);
    let wait = context.security.failed_logins.record_failure(request.connection.remote_address.map(|address| address.ip()));
    if !wait.is_zero() && !attempt.speculative {
        std::thread::sleep(wait);
    }
}
