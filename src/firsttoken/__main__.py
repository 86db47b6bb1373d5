from firsttoken.cli import main

main()
