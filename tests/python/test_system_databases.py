"""The databases a fresh standalone mongod has (admin, config, local) and listDatabases' filter,
nameOnly and authorizedDatabases over them."""


def test_admin_config_and_local_exist_from_the_start(client):
    names = client.list_database_names()
    assert {"admin", "config", "local"} <= set(names)
    named = client.admin.command("listDatabases", nameOnly=True)
    assert {"admin", "config", "local"} <= {entry["name"] for entry in named["databases"]}
    assert all(set(entry) == {"name"} for entry in named["databases"]) and "totalSize" not in named
    local_only = client.admin.command("listDatabases", filter={"name": "local"})["databases"]
    assert [entry["name"] for entry in local_only] == ["local"] and local_only[0]["empty"] is False
    everything = client.admin.command("listDatabases", authorizedDatabases=False)["databases"]
    assert {"admin", "config", "local"} <= {entry["name"] for entry in everything}
    version = client.admin["system.version"].find_one({"_id": "featureCompatibilityVersion"})
    assert version == {"_id": "featureCompatibilityVersion", "version": "8.0"}
    start = client.local.startup_log.find_one()
    assert set(start) >= {"_id", "hostname", "startTime", "startTimeLocal", "cmdLine", "pid"}
    assert client.local.command("collStats", "startup_log")["capped"] is True
    indexes = {index["name"]: index for index in client.config["system.sessions"].list_indexes()}
    assert indexes["lsidTTLIndex"]["key"] == {"lastUse": 1} and indexes["lsidTTLIndex"]["expireAfterSeconds"] == 1800
