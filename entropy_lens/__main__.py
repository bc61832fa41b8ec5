from entropy_lens.cli import main

raise SystemExit(main())
