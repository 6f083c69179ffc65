//! Authentication and authorization through the Rust driver against `myriad --auth`:
//! SCRAM-SHA-1 and SCRAM-SHA-256 logins, wrong passwords, the refusal of unauthenticated
//! commands, the localhost exception, each built-in role's allowed and refused commands,
//! cursor ownership, and many clients logging in at once.


use bson::{doc, Bson, Document};
use myriad_testkit::{error_code, TestServer};
use mongodb::options::AuthMechanism;
use mongodb::Client;

const ROOT_PASSWORD: &str = "root-secret";

/// A server with `--auth` and a root user created through the localhost exception.
async fn server_with_root() -> (TestServer, Client) {
    let server = TestServer::builder().auth().start();
    let anonymous = server.client().await;
    anonymous
        .database("admin")
        .run_command(doc! { "createUser": "root", "pwd": ROOT_PASSWORD, "roles": ["root"] })
        .await
        .expect("the localhost exception lets the first user be created");
    let root = server.client_as("root", ROOT_PASSWORD, "admin", AuthMechanism::ScramSha256).await;
    (server, root)
}

async fn run(client: &Client, db: &str, command: Document) -> Result<Document, i32> {
    client.database(db).run_command(command).await.map_err(|error| error_code(&error).unwrap_or(-1))
}

#[tokio::test]
async fn both_mechanisms_log_in_and_wrong_passwords_fail() {
    let (server, root) = server_with_root().await;
    run(&root, "admin", doc! { "createUser": "ann", "pwd": "pencil", "roles": [{ "role": "readWrite", "db": "shop" }] }).await.expect("createUser");
    for mechanism in [AuthMechanism::ScramSha1, AuthMechanism::ScramSha256] {
        let ann = server.client_as("ann", "pencil", "admin", mechanism.clone()).await;
        run(&ann, "shop", doc! { "insert": "items", "documents": [{ "mechanism": format!("{mechanism:?}") }] }).await.expect("insert as ann");
        let status = run(&ann, "admin", doc! { "connectionStatus": 1 }).await.expect("connectionStatus");
        let auth_info = status.get_document("authInfo").expect("authInfo");
        assert_eq!(auth_info.get_array("authenticatedUsers").expect("users"), &vec![Bson::Document(doc! { "user": "ann", "db": "admin" })]);
        assert_eq!(auth_info.get_array("authenticatedUserRoles").expect("roles"), &vec![Bson::Document(doc! { "role": "readWrite", "db": "shop" })]);

        let wrong = server.client_as("ann", "crayon", "admin", mechanism).await;
        let error = wrong.database("shop").run_command(doc! { "ping": 1 }).await.expect_err("wrong password");
        assert!(matches!(*error.kind, mongodb::error::ErrorKind::Authentication { .. }), "{error}");
    }
    // A raw conversation for an unknown user answers AuthenticationFailed (18).
    let anonymous = server.client().await;
    let payload = bson::Binary { subtype: bson::spec::BinarySubtype::Generic, bytes: b"n,,n=nobody,r=abcdefgh".to_vec() };
    let refused = run(&anonymous, "admin", doc! { "saslStart": 1, "mechanism": "SCRAM-SHA-256", "payload": payload }).await;
    assert_eq!(refused, Err(18));
    let unknown_mechanism = run(&anonymous, "admin", doc! { "saslStart": 1, "mechanism": "PLAIN", "payload": "x" }).await;
    assert_eq!(unknown_mechanism, Err(334));
    let log = run(&root, "admin", doc! { "getLog": "global" }).await.expect("getLog");
    let failures: Vec<serde_json::Value> = log
        .get_array("log")
        .expect("log lines")
        .iter()
        .filter_map(|line| line.as_str().and_then(|line| serde_json::from_str::<serde_json::Value>(line).ok()))
        .filter(|line| line["id"] == 20249)
        .collect();
    let wrong_password = failures.iter().find(|line| line["attr"]["principalName"] == "ann").expect("a 20249 line for ann");
    assert_eq!(wrong_password["msg"], "Authentication failed");
    assert_eq!(wrong_password["attr"]["authenticationDatabase"], "admin");
    assert!(wrong_password["attr"]["mechanism"].as_str().is_some_and(|mechanism| mechanism.starts_with("SCRAM-SHA-")));
    assert!(wrong_password["attr"]["error"].as_str().is_some_and(|error| error.contains("AuthenticationFailed")));
    let hello = run(&anonymous, "admin", doc! { "hello": 1, "saslSupportedMechs": "admin.ann" }).await.expect("hello");
    assert_eq!(hello.get_array("saslSupportedMechs").expect("mechanisms"), &vec![Bson::from("SCRAM-SHA-1"), Bson::from("SCRAM-SHA-256")]);
}

#[tokio::test]
async fn unauthenticated_connections_run_only_the_handshake_commands() {
    let (server, _root) = server_with_root().await;
    let anonymous = server.client().await;
    for allowed in [doc! { "hello": 1 }, doc! { "ping": 1 }, doc! { "buildInfo": 1 }, doc! { "connectionStatus": 1 }, doc! { "listCommands": 1 }, doc! { "logout": 1 }] {
        run(&anonymous, "admin", allowed.clone()).await.unwrap_or_else(|code| panic!("{allowed} refused with {code}"));
    }
    let error = anonymous.database("shop").run_command(doc! { "find": "items" }).await.expect_err("find needs authentication");
    assert_eq!(error_code(&error), Some(13));
    assert!(error.to_string().contains("Command find requires authentication"), "{error}");
    for refused in [doc! { "insert": "items", "documents": [{}] }, doc! { "listDatabases": 1 }, doc! { "serverStatus": 1 }] {
        assert_eq!(run(&anonymous, "admin", refused).await.map(|_| ()), Err(13));
    }
    let commands = run(&anonymous, "admin", doc! { "listCommands": 1 }).await.expect("listCommands");
    let commands = commands.get_document("commands").expect("commands");
    assert_eq!(commands.get_document("find").and_then(|find| find.get_bool("requiresAuth")), Ok(true));
    assert_eq!(commands.get_document("hello").and_then(|hello| hello.get_bool("requiresAuth")), Ok(false));
}

#[tokio::test]
async fn the_localhost_exception_creates_the_first_admin_user_only() {
    let server = TestServer::builder().auth().start();
    let anonymous = server.client().await;
    let elsewhere = run(&anonymous, "shop", doc! { "createUser": "early", "pwd": "p", "roles": [] }).await;
    assert_eq!(elsewhere.map(|_| ()), Err(13));
    assert_eq!(run(&anonymous, "shop", doc! { "find": "items" }).await.map(|_| ()), Err(13));
    run(&anonymous, "admin", doc! { "createUser": "first", "pwd": "p", "roles": ["userAdminAnyDatabase"] }).await.expect("first user");
    let second = run(&anonymous, "admin", doc! { "createUser": "second", "pwd": "p", "roles": [] }).await;
    assert_eq!(second.map(|_| ()), Err(13));
}

/// (role, role database, commands allowed in order of [`probes`]).
const ROLE_TABLE: &[(&str, &str, [bool; 8])] = &[
    //                                   find   insert createIx dbStats createUser serverStatus listDbs otherDbFind
    ("read", "shop",                    [true,  false, false,   true,   false,     false,       false,  false]),
    ("readWrite", "shop",               [true,  true,  true,    true,   false,     false,       false,  false]),
    ("dbAdmin", "shop",                 [false, false, true,    true,   false,     false,       false,  false]),
    ("dbOwner", "shop",                 [true,  true,  true,    true,   true,      false,       false,  false]),
    ("userAdmin", "shop",               [false, false, false,   false,  true,      false,       false,  false]),
    ("clusterMonitor", "admin",         [false, false, false,   true,   false,     true,        true,   false]),
    ("clusterAdmin", "admin",           [false, false, false,   true,   false,     true,        true,   false]),
    ("readAnyDatabase", "admin",        [true,  false, false,   true,   false,     false,       true,   true]),
    ("readWriteAnyDatabase", "admin",   [true,  true,  true,    true,   false,     false,       true,   true]),
    ("userAdminAnyDatabase", "admin",   [false, false, false,   false,  true,      false,       true,   false]),
    ("dbAdminAnyDatabase", "admin",     [false, false, true,    true,   false,     false,       true,   false]),
    ("backup", "admin",                 [true,  false, false,   true,   false,     true,        true,   true]),
    ("restore", "admin",                [false, true,  true,    false,  true,      false,       true,   false]),
    ("root", "admin",                   [true,  true,  true,    true,   true,      true,        true,   true]),
];

/// The probes: (database, command). createUser names a user per role so each runs once.
fn probes(role: &str) -> [(&'static str, Document); 8] {
    [
        ("shop", doc! { "find": "items" }),
        ("shop", doc! { "insert": "items", "documents": [{ "by": role }] }),
        ("shop", doc! { "createIndexes": "items", "indexes": [{ "key": { "by": 1 }, "name": "by_1" }] }),
        ("shop", doc! { "dbStats": 1 }),
        ("shop", doc! { "createUser": format!("made_by_{role}"), "pwd": "p", "roles": [] }),
        ("admin", doc! { "serverStatus": 1 }),
        // All databases: only the holders of the listDatabases action (any user may list the
        // databases its privileges reach; see tests/python/test_auth.py).
        ("admin", doc! { "listDatabases": 1, "authorizedDatabases": false }),
        ("elsewhere", doc! { "find": "items" }),
    ]
}

#[tokio::test]
async fn each_builtin_role_allows_and_refuses_its_commands() {
    let (server, root) = server_with_root().await;
    run(&root, "shop", doc! { "insert": "items", "documents": [{ "seed": 1 }] }).await.expect("seed");
    for (role, role_db, expected) in ROLE_TABLE {
        let user = format!("user_{role}");
        run(&root, "admin", doc! { "createUser": &user, "pwd": "p", "roles": [{ "role": *role, "db": *role_db }] }).await.expect("createUser");
        let client = server.client_as(&user, "p", "admin", AuthMechanism::ScramSha256).await;
        for ((db, command), allowed) in probes(role).into_iter().zip(expected) {
            let outcome = run(&client, db, command.clone()).await;
            match (allowed, outcome) {
                (true, Ok(_)) | (false, Err(13)) => {}
                (_, other) => panic!("{role}: {db} {command} answered {other:?}, expected allowed: {allowed}"),
            }
        }
    }
}

#[tokio::test]
async fn cursors_belong_to_the_user_that_opened_them() {
    let (server, root) = server_with_root().await;
    run(&root, "shop", doc! { "insert": "items", "documents": [{ "n": 1 }, { "n": 2 }, { "n": 3 }, { "n": 4 }] }).await.expect("seed");
    for user in ["owner", "other"] {
        run(&root, "admin", doc! { "createUser": user, "pwd": "p", "roles": [{ "role": "read", "db": "shop" }] }).await.expect("createUser");
    }
    let owner = server.client_as("owner", "p", "admin", AuthMechanism::ScramSha1).await;
    let other = server.client_as("other", "p", "admin", AuthMechanism::ScramSha256).await;
    // The owner's commands share one logical session, as a driver's cursor does.
    let mut session = owner.start_session().await.expect("session");
    let shop = owner.database("shop");
    let opened = shop.run_command(doc! { "find": "items", "batchSize": 1 }).session(&mut session).await.expect("find");
    let cursor_id = opened.get_document("cursor").and_then(|cursor| cursor.get_i64("id")).expect("cursor id");
    assert_ne!(cursor_id, 0);
    assert_eq!(run(&other, "shop", doc! { "getMore": cursor_id, "collection": "items" }).await.map(|_| ()), Err(13));
    assert_eq!(run(&other, "shop", doc! { "killCursors": "items", "cursors": [cursor_id] }).await.map(|_| ()), Err(13));
    let next = shop.run_command(doc! { "getMore": cursor_id, "collection": "items", "batchSize": 1 }).session(&mut session).await.expect("owner's getMore");
    assert_eq!(next.get_document("cursor").and_then(|cursor| cursor.get_array("nextBatch")).map(Vec::len), Ok(1));
    let rest = shop.run_command(doc! { "getMore": cursor_id, "collection": "items" }).session(&mut session).await.expect("owner's last getMore");
    let rest = rest.get_document("cursor").expect("cursor");
    assert_eq!(rest.get_array("nextBatch").map(Vec::len), Ok(2));
    assert_eq!(rest.get_i64("id"), Ok(0));
}

#[tokio::test]
async fn many_clients_log_in_at_once() {
    let (server, root) = server_with_root().await;
    run(&root, "admin", doc! { "createUser": "crowd", "pwd": "p", "roles": [{ "role": "readWrite", "db": "crowd" }] }).await.expect("createUser");
    let mut tasks = Vec::new();
    for index in 0..24 {
        let mechanism = if index % 2 == 0 { AuthMechanism::ScramSha1 } else { AuthMechanism::ScramSha256 };
        let client = server.client_as("crowd", "p", "admin", mechanism).await;
        tasks.push(tokio::spawn(async move { run(&client, "crowd", doc! { "insert": "logins", "documents": [{ "index": index }] }).await }));
    }
    for task in tasks {
        task.await.expect("task").expect("insert after login");
    }
    let counted = run(&root, "crowd", doc! { "count": "logins" }).await.expect("count");
    assert_eq!(counted.get_i32("n"), Ok(24));
}

#[tokio::test]
async fn user_commands_manage_users() {
    let (server, root) = server_with_root().await;
    run(&root, "shop", doc! { "createUser": "bob", "pwd": "one", "roles": ["read"], "customData": { "team": "blue" } }).await.expect("createUser");
    assert_eq!(run(&root, "shop", doc! { "createUser": "bob", "pwd": "one", "roles": [] }).await.map(|_| ()), Err(51003));
    assert_eq!(run(&root, "shop", doc! { "createUser": "carl", "pwd": "one", "roles": ["noSuchRole"] }).await.map(|_| ()), Err(31));
    let info = run(&root, "shop", doc! { "usersInfo": "bob" }).await.expect("usersInfo");
    let users = info.get_array("users").expect("users");
    let bob = users.first().and_then(Bson::as_document).expect("bob");
    assert_eq!(bob.get_str("_id"), Ok("shop.bob"));
    assert_eq!(bob.get_array("roles").expect("roles"), &vec![Bson::Document(doc! { "role": "read", "db": "shop" })]);
    assert_eq!(bob.get_array("mechanisms").expect("mechanisms"), &vec![Bson::from("SCRAM-SHA-1"), Bson::from("SCRAM-SHA-256")]);
    assert!(bob.get("credentials").is_none());
    assert!(matches!(bob.get("userId"), Some(Bson::Binary(binary)) if binary.subtype == bson::spec::BinarySubtype::Uuid));
    run(&root, "shop", doc! { "updateUser": "bob", "pwd": "two" }).await.expect("updateUser");
    run(&root, "shop", doc! { "grantRolesToUser": "bob", "roles": ["readWrite"] }).await.expect("grant");
    run(&root, "shop", doc! { "revokeRolesFromUser": "bob", "roles": ["read"] }).await.expect("revoke");
    let bob_client = server.client_as("bob", "two", "shop", AuthMechanism::ScramSha256).await;
    run(&bob_client, "shop", doc! { "insert": "items", "documents": [{}] }).await.expect("bob writes with readWrite");
    let mine = run(&bob_client, "shop", doc! { "usersInfo": "bob" }).await.expect("a user may see itself");
    assert_eq!(mine.get_array("users").map(Vec::len), Ok(1));
    assert_eq!(run(&bob_client, "shop", doc! { "usersInfo": 1 }).await.map(|_| ()), Err(13));
    run(&root, "shop", doc! { "createUser": "dave", "pwd": "x", "roles": [] }).await.expect("createUser");
    assert_eq!(run(&root, "shop", doc! { "dropUser": "nobody" }).await.map(|_| ()), Err(11));
    run(&root, "shop", doc! { "dropUser": "dave" }).await.expect("dropUser");
    let dropped = run(&root, "shop", doc! { "dropAllUsersFromDatabase": 1 }).await.expect("dropAllUsersFromDatabase");
    assert_eq!(dropped.get_i32("n"), Ok(1));
    let none = run(&root, "shop", doc! { "usersInfo": 1 }).await.expect("usersInfo");
    assert_eq!(none.get_array("users").map(Vec::len), Ok(0));
}

#[tokio::test]
async fn custom_roles_grant_their_privileges_and_inherited_ones() {
    let (server, root) = server_with_root().await;
    let orders = doc! { "db": "shop", "collection": "orders" };
    run(&root, "shop", doc! { "createRole": "orderReader", "privileges": [{ "resource": orders.clone(), "actions": ["find"] }], "roles": [] }).await.expect("createRole");
    run(&root, "shop", doc! { "createRole": "orderClerk", "privileges": [{ "resource": orders.clone(), "actions": ["insert"] }], "roles": ["orderReader"] }).await.expect("createRole");
    assert_eq!(run(&root, "shop", doc! { "createRole": "orderClerk", "privileges": [], "roles": [] }).await.map(|_| ()), Err(51002));
    assert_eq!(run(&root, "shop", doc! { "createRole": "odd", "privileges": [{ "resource": orders.clone(), "actions": ["fly"] }], "roles": [] }).await.map(|_| ()), Err(9));
    let elsewhere = doc! { "db": "other", "collection": "" };
    assert_eq!(run(&root, "shop", doc! { "createRole": "wide", "privileges": [{ "resource": elsewhere, "actions": ["find"] }], "roles": [] }).await.map(|_| ()), Err(2));
    run(&root, "shop", doc! { "createUser": "clerk", "pwd": "p", "roles": ["orderClerk"] }).await.expect("createUser");
    let clerk = server.client_as("clerk", "p", "shop", AuthMechanism::ScramSha256).await;
    run(&clerk, "shop", doc! { "insert": "orders", "documents": [{ "n": 1 }] }).await.expect("insert from orderClerk");
    run(&clerk, "shop", doc! { "find": "orders" }).await.expect("find inherited from orderReader");
    assert_eq!(run(&clerk, "shop", doc! { "find": "items" }).await.map(|_| ()), Err(13));
    assert_eq!(run(&clerk, "shop", doc! { "insert": "items", "documents": [{}] }).await.map(|_| ()), Err(13));

    let info = run(&root, "shop", doc! { "rolesInfo": "orderClerk", "showPrivileges": true }).await.expect("rolesInfo");
    let clerk_role = info.get_array("roles").ok().and_then(|roles| roles.first()).and_then(Bson::as_document).expect("one role").clone();
    assert_eq!(clerk_role.get_bool("isBuiltin"), Ok(false));
    assert_eq!(clerk_role.get_array("inheritedRoles").expect("inherited"), &vec![Bson::Document(doc! { "role": "orderReader", "db": "shop" })]);
    assert_eq!(clerk_role.get_array("inheritedPrivileges").map(Vec::len), Ok(2));

    run(&root, "shop", doc! { "revokePrivilegesFromRole": "orderReader", "privileges": [{ "resource": orders.clone(), "actions": ["find"] }] }).await.expect("revoke");
    assert_eq!(run(&clerk, "shop", doc! { "find": "orders" }).await.map(|_| ()), Err(13));
    run(&root, "shop", doc! { "grantPrivilegesToRole": "orderReader", "privileges": [{ "resource": orders, "actions": ["find"] }] }).await.expect("grant");
    run(&clerk, "shop", doc! { "find": "orders" }).await.expect("find granted again");
    let cycle = run(&root, "shop", doc! { "grantRolesToRole": "orderReader", "roles": ["orderClerk"] }).await;
    assert_eq!(cycle.map(|_| ()), Err(49));
    assert_eq!(run(&root, "shop", doc! { "updateRole": "orderClerk", "roles": ["orderClerk"] }).await.map(|_| ()), Err(49));
    run(&root, "shop", doc! { "dropRole": "orderReader" }).await.expect("dropRole");
    assert_eq!(run(&root, "shop", doc! { "dropRole": "orderReader" }).await.map(|_| ()), Err(31));
    assert_eq!(run(&clerk, "shop", doc! { "find": "orders" }).await.map(|_| ()), Err(13));
    let after = run(&root, "shop", doc! { "rolesInfo": "orderClerk" }).await.expect("rolesInfo");
    let roles_left = after.get_array("roles").ok().and_then(|roles| roles.first()).and_then(Bson::as_document).and_then(|role| role.get_array("roles").ok()).map(Vec::len);
    assert_eq!(roles_left, Some(0));
    let builtin = run(&root, "shop", doc! { "rolesInfo": "read" }).await.expect("rolesInfo read");
    assert_eq!(builtin.get_array("roles").ok().and_then(|roles| roles.first()).and_then(Bson::as_document).and_then(|role| role.get_bool("isBuiltin").ok()), Some(true));
}

#[tokio::test]
async fn hello_answers_speculative_authentication() {
    let (server, _root) = server_with_root().await;
    let anonymous = server.client().await;
    let first = bson::Binary { subtype: bson::spec::BinarySubtype::Generic, bytes: b"n,,n=root,r=clientnonce".to_vec() };
    let speculative = doc! { "saslStart": 1, "mechanism": "SCRAM-SHA-256", "payload": first.clone(), "db": "admin" };
    let hello = run(&anonymous, "admin", doc! { "hello": 1, "speculativeAuthenticate": speculative }).await.expect("hello");
    let answer = hello.get_document("speculativeAuthenticate").expect("speculativeAuthenticate");
    assert_eq!(answer.get_i32("conversationId"), Ok(1));
    assert_eq!(answer.get_bool("done"), Ok(false));
    let server_first = answer.get_binary_generic("payload").expect("payload");
    assert!(server_first.starts_with(b"r=clientnonce"), "{}", String::from_utf8_lossy(server_first));
    assert!(String::from_utf8_lossy(server_first).ends_with(",i=15000"));
    let nobody = bson::Binary { subtype: bson::spec::BinarySubtype::Generic, bytes: b"n,,n=nobody,r=x".to_vec() };
    let unknown = doc! { "saslStart": 1, "mechanism": "SCRAM-SHA-256", "payload": nobody, "db": "admin" };
    let hello = run(&anonymous, "admin", doc! { "hello": 1, "speculativeAuthenticate": unknown }).await.expect("hello still answers");
    assert!(hello.get("speculativeAuthenticate").is_none());
}

#[tokio::test]
async fn granting_a_role_needs_grant_role_on_its_database() {
    let (server, root) = server_with_root().await;
    run(&root, "admin", doc! { "createUser": "keeper", "pwd": "p", "roles": [{ "role": "userAdmin", "db": "shop" }] }).await.expect("createUser");
    let keeper = server.client_as("keeper", "p", "admin", AuthMechanism::ScramSha256).await;
    run(&keeper, "shop", doc! { "createUser": "local", "pwd": "p", "roles": ["read"] }).await.expect("a shop role from a shop userAdmin");
    let foreign = run(&keeper, "shop", doc! { "createUser": "foreign", "pwd": "p", "roles": [{ "role": "read", "db": "other" }] }).await;
    assert_eq!(foreign.map(|_| ()), Err(13));
    assert_eq!(run(&keeper, "shop", doc! { "grantRolesToUser": "local", "roles": [{ "role": "readWrite", "db": "other" }] }).await.map(|_| ()), Err(13));
    run(&keeper, "shop", doc! { "grantRolesToUser": "local", "roles": ["readWrite"] }).await.expect("grant a shop role");
    run(&keeper, "shop", doc! { "updateUser": "local", "pwd": "q" }).await.expect("changePassword");
}
