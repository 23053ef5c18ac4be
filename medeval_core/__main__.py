from medeval_core.cli import main

raise SystemExit(main())
