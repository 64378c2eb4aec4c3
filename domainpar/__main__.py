from domainpar.cli.main import main

main()
