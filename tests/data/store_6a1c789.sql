-- The schema and a few rows of medeval's store at commit 6a1c789 (before Alembic), generated once from
-- that commit's medeval_core/store.py; tests/test_migrations.py upgrades it to head.

BEGIN TRANSACTION;
CREATE TABLE annotations (
	id INTEGER NOT NULL, 
	item_id VARCHAR NOT NULL, 
	annotator VARCHAR NOT NULL, 
	task VARCHAR NOT NULL, 
	criterion VARCHAR NOT NULL, 
	value VARCHAR NOT NULL, 
	payload JSON NOT NULL, 
	created_at DATETIME NOT NULL, 
	PRIMARY KEY (id)
);
INSERT INTO "annotations" VALUES(1,'i1','dr-a','pairwise','accuracy','A','{}','2026-12-01 10:30:16.873576');
CREATE TABLE case_results (
	id INTEGER NOT NULL, 
	run_id VARCHAR NOT NULL, 
	case_id VARCHAR NOT NULL, 
	repetition INTEGER NOT NULL, 
	status VARCHAR NOT NULL, 
	output JSON NOT NULL, 
	metrics JSON NOT NULL, 
	error VARCHAR, 
	started_at DATETIME, 
	finished_at DATETIME, 
	PRIMARY KEY (id), 
	CONSTRAINT uq_result_run_case_rep UNIQUE (run_id, case_id, repetition), 
	FOREIGN KEY(run_id) REFERENCES runs (id)
);
INSERT INTO "case_results" VALUES(1,'ddi-old-1','c1',0,'ok','{"label": "benign"}','{"correct": true}',NULL,NULL,NULL);
INSERT INTO "case_results" VALUES(2,'ddi-old-1','c2',0,'failed','{}','{}','boom',NULL,NULL);
INSERT INTO "case_results" VALUES(3,'ddxplus-old-2','p1',0,'ok','{}','{"cost": 3.5, "correct": false}',NULL,NULL,NULL);
CREATE TABLE judgements (
	id INTEGER NOT NULL, 
	run_id VARCHAR, 
	case_id VARCHAR NOT NULL, 
	repetition INTEGER NOT NULL, 
	judge_name VARCHAR NOT NULL, 
	judge_model VARCHAR NOT NULL, 
	attempt INTEGER NOT NULL, 
	ok BOOLEAN NOT NULL, 
	verdict JSON NOT NULL, 
	latency_s FLOAT, 
	http_status INTEGER, 
	error VARCHAR, 
	created_at DATETIME NOT NULL, 
	PRIMARY KEY (id), 
	FOREIGN KEY(run_id) REFERENCES runs (id)
);
INSERT INTO "judgements" VALUES(1,'ddi-old-1','c1',0,'ddi','',1,1,'{"correct": true}',NULL,NULL,NULL,'2026-12-01 10:30:16.871301');
CREATE TABLE runs (
	id VARCHAR NOT NULL, 
	benchmark VARCHAR NOT NULL, 
	label VARCHAR NOT NULL, 
	status VARCHAR NOT NULL, 
	config JSON NOT NULL, 
	settings_hash VARCHAR NOT NULL, 
	versions JSON NOT NULL, 
	expected_cases INTEGER, 
	summary JSON NOT NULL, 
	error VARCHAR, 
	created_at DATETIME NOT NULL, 
	started_at DATETIME, 
	finished_at DATETIME, 
	PRIMARY KEY (id)
);
INSERT INTO "runs" VALUES('ddi-old-1','ddi','old run','completed','{"benchmark": "ddi", "label": "old run", "params": {"limit": 2}, "settings": {}, "settings_hash": "h1", "versions": {"torch": "2.13.0"}, "repetitions": 1}','h1','{"torch": "2.13.0"}',2,'{}',NULL,'2026-12-01 10:30:16.859050',NULL,NULL);
INSERT INTO "runs" VALUES('ddxplus-old-2','ddxplus','second','pending','{"benchmark": "ddxplus", "label": "second", "params": {}, "settings": {}, "settings_hash": "", "versions": {}, "repetitions": 1}','','{}',1,'{}',NULL,'2026-12-01 10:30:16.863739',NULL,NULL);
CREATE TABLE turns (
	id INTEGER NOT NULL, 
	run_id VARCHAR NOT NULL, 
	case_id VARCHAR NOT NULL, 
	repetition INTEGER NOT NULL, 
	"index" INTEGER NOT NULL, 
	actor VARCHAR NOT NULL, 
	action VARCHAR NOT NULL, 
	payload JSON NOT NULL, 
	cost FLOAT NOT NULL, 
	created_at DATETIME NOT NULL, 
	PRIMARY KEY (id), 
	CONSTRAINT uq_turn UNIQUE (run_id, case_id, repetition, "index"), 
	FOREIGN KEY(run_id) REFERENCES runs (id)
);
INSERT INTO "turns" VALUES(1,'ddxplus-old-2','p1',0,0,'agent','ask','{"q": "E_0"}',0.0,'2026-12-01 10:30:16.869878');
INSERT INTO "turns" VALUES(2,'ddxplus-old-2','p1',0,1,'agent','ask','{"q": "E_1"}',0.0,'2026-12-01 10:30:16.869993');
CREATE INDEX ix_runs_status ON runs (status);
CREATE INDEX ix_runs_benchmark ON runs (benchmark);
CREATE INDEX ix_annotations_annotator ON annotations (annotator);
CREATE INDEX ix_annotations_item_id ON annotations (item_id);
CREATE INDEX ix_case_results_run_id ON case_results (run_id);
CREATE INDEX ix_turns_run_id ON turns (run_id);
CREATE INDEX ix_judgements_case_id ON judgements (case_id);
CREATE INDEX ix_judgements_run_id ON judgements (run_id);
COMMIT;
