//! `authenticate` with MONGODB-X509: a TLS client whose certificate the CA vouches for logs in
//! as the user named by the certificate's subject (an RFC 2253 string, `CN=...,O=...,C=...`)
//! in `$external`. The TLS layer records the subject in the session
//! ([`crate::session::TlsPeer`]); nothing here reads certificates.
//!
//! As mongod: `user` is optional and, when given, must equal the subject; the user must exist
//! in `$external` (created there by `createUser`, with roles as usual and no password). A hello's
//! `speculativeAuthenticate: {authenticate: 1, mechanism: "MONGODB-X509", db?}` runs the same
//! command ([`speculative`]) and answers `{dbname, user}`; its failure is silent.
//!
//! Errors, in mongod's order and with its codes: no verified certificate, a `user` other than
//! the subject, or a mechanism other than MONGODB-X509 answer AuthenticationFailed (18)
//! "Authentication failed." (the log line says which); a database other than `$external`
//! answers ProtocolError (17); an unknown user answers UserNotFound (11).

use bson::{doc, Bson, Document};

use crate::auth::{store, AUTHENTICATION_FAILED, EXTERNAL, USER_NOT_FOUND};
use crate::command::sasl::{log_failure, log_success, Attempt};
use crate::request::unknown_fields::GENERIC_ARGUMENTS;
use crate::error::{CommandError, CommandResult, MISSING_FIELD, PROTOCOL_ERROR};
use crate::request::field_type_error;
use crate::{CommandRequest, ServerContext};

pub const MONGODB_X509: &str = "MONGODB-X509";

pub fn run(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    authenticate(context, request, &request.body, &request.db, false)
}

/// A hello's `speculativeAuthenticate` for MONGODB-X509: the reply's document, or None when
/// the attempt failed (the hello still succeeds and the driver authenticates explicitly).
pub fn speculative(context: &ServerContext, request: &CommandRequest, body: &Document) -> Option<Document> {
    let db = match body.get("db") {
        None => EXTERNAL.to_string(),
        Some(Bson::String(db)) => db.clone(),
        Some(_) => return None,
    };
    let mut reply = authenticate(context, request, body, &db, true).ok()?;
    reply.remove("ok");
    Some(reply)
}

/// The command's own fields, checked as mongod's strict parser checks them.
struct Arguments<'a> {
    mechanism: &'a str,
    user: Option<&'a str>,
}

fn parse(body: &Document, speculative: bool) -> CommandResult<Arguments<'_>> {
    let mut mechanism = None;
    let mut user = None;
    for (field, value) in body {
        match field.as_str() {
            "authenticate" => {}
            "mechanism" => match value {
                Bson::String(name) => mechanism = Some(name.as_str()),
                other => return Err(field_type_error("authenticate.mechanism", "string", other)),
            },
            "user" => match value {
                Bson::String(name) => user = Some(name.as_str()),
                other => return Err(field_type_error("authenticate.user", "string", other)),
            },
            "db" if speculative => {}
            other if GENERIC_ARGUMENTS.contains(&other) => {}
            other => return Err(CommandError::unknown_field(&format!("authenticate.{other}"))),
        }
    }
    let mechanism = mechanism.ok_or_else(|| CommandError::new(MISSING_FIELD, "BSON field 'authenticate.mechanism' is missing but a required field"))?;
    Ok(Arguments { mechanism, user })
}

fn authenticate(context: &ServerContext, request: &CommandRequest, body: &Document, db: &str, speculative: bool) -> CommandResult<Document> {
    let arguments = parse(body, speculative)?;
    let named = arguments.user.unwrap_or_default();
    let fail = |user: &str, error: CommandError, reason: &str| {
        log_failure(context, request, &Attempt { mechanism: arguments.mechanism, user, db, speculative }, reason);
        error
    };
    let subject = match certificate_subject(request, &arguments, db) {
        Ok(subject) => subject,
        Err((error, reason)) => return Err(fail(named, error, &reason)),
    };
    let id = store::document_id(EXTERNAL, &subject);
    if context.users.get(store::USERS_COLLECTION, &id)?.is_none() {
        let message = format!("Could not find user \"{subject}\" for db \"{EXTERNAL}\"");
        return Err(fail(&subject, CommandError::new(USER_NOT_FOUND, message.clone()), &format!("UserNotFound: {message}")));
    }
    log_success(context, request, &Attempt { mechanism: MONGODB_X509, user: &subject, db: EXTERNAL, speculative });
    Ok(doc! { "dbname": EXTERNAL, "user": subject, "ok": 1.0 })
}

/// The user the connection's certificate names, after mongod's checks; Err carries the reply
/// and the reason for the log.
fn certificate_subject(request: &CommandRequest, arguments: &Arguments<'_>, db: &str) -> Result<String, (CommandError, String)> {
    let refused = |reason: &str| (CommandError::new(AUTHENTICATION_FAILED, "Authentication failed."), format!("AuthenticationFailed: {reason}"));
    if arguments.mechanism.is_empty() {
        return Err(refused("Auth mechanism not specified"));
    }
    if arguments.mechanism != MONGODB_X509 {
        return Err(refused(&format!("Unsupported mechanism: {}", arguments.mechanism)));
    }
    let peer = request.connection.session.tls_peer();
    let Some(subject) = peer.and_then(|peer| peer.certificate_subject.clone()) else {
        return Err(refused("No verified subject name available from client"));
    };
    if arguments.user.is_some_and(|user| user != subject) {
        return Err(refused("There is no x.509 client certificate matching the user."));
    }
    if db != EXTERNAL {
        let message = "X.509 authentication must always use the $external database.";
        return Err((CommandError::new(PROTOCOL_ERROR, message), format!("ProtocolError: {message}")));
    }
    Ok(subject)
}
