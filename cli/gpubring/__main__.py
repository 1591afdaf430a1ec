from gpubring.app import main

main()
