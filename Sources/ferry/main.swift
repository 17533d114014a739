import FerryCLI
FerryCLI.main()
